//! A version as the server holds it: a base shard file and the deltas on top of it.
//!
//! Version V = its base (format 1) plus the deltas from the base's version up to V, each a
//! mapped delta file (format 2) whose parent is the version below it. A lookup asks the
//! deltas, newest first, then the base: the first file that has the key answers (a
//! deletion answers "missing"). V and its parent share every file but V's own delta
//! (`Arc`), so applying a delta maps the delta and nothing else.

use crate::shardfile::ShardFile;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

pub struct Dict {
    pub version: u64,
    /// The base first, then the deltas in order; the last one is this version's file.
    pub layers: Vec<Arc<ShardFile>>,
    pub dim: u32,
    pub value_bytes: usize,
    /// When a seek last read this version (State's clock, ms + 1; 0: never): readers
    /// still on it keep it loaded (the transfer unloads only versions idle long enough).
    pub last_read: AtomicU64,
}

impl Dict {
    /// A version that is a base.
    pub fn base(file: ShardFile) -> Result<Dict, String> {
        if file.parent.is_some() {
            return Err(format!(
                "{}: is a delta on version {}, not a base",
                file.path,
                file.parent.unwrap_or_default()
            ));
        }
        Ok(Dict {
            version: file.version,
            dim: file.dim,
            value_bytes: file.value_bytes,
            layers: vec![Arc::new(file)],
            last_read: AtomicU64::new(0),
        })
    }

    /// `delta` applied on top of this version: refused unless it is a delta whose parent
    /// is this version, with the same dimension.
    pub fn apply(&self, delta: ShardFile) -> Result<Dict, String> {
        match delta.parent {
            None => {
                return Err(format!(
                    "{}: version {} is a base, not a delta on version {}",
                    delta.path, delta.version, self.version
                ))
            }
            Some(p) if p != self.version => {
                return Err(format!(
                    "{}: version {} is a delta on version {p}, not on version {}",
                    delta.path, delta.version, self.version
                ))
            }
            Some(_) => {}
        }
        if delta.dim != self.dim {
            return Err(format!(
                "{}: dimension {}, its parent {} has {}",
                delta.path, delta.dim, self.version, self.dim
            ));
        }
        let mut layers = self.layers.clone();
        let version = delta.version;
        layers.push(Arc::new(delta));
        Ok(Dict {
            version,
            layers,
            dim: self.dim,
            value_bytes: self.value_bytes,
            last_read: AtomicU64::new(0),
        })
    }

    /// The versions of the files this version is made of, base first.
    pub fn chain(&self) -> Vec<u64> {
        self.layers.iter().map(|l| l.version).collect()
    }

    fn deltas(&self) -> &[Arc<ShardFile>] {
        &self.layers[1..]
    }

    /// The value bytes of `key`, if this version has it.
    pub fn get(&self, key: u64) -> Option<&[u8]> {
        for delta in self.deltas().iter().rev() {
            if let Some(i) = delta.find(key) {
                return (!delta.is_deleted(i)).then(|| delta.value(i));
            }
        }
        self.layers[0].get(key)
    }

    /// Look up a batch: `out` gets keys.len() values (zeros where missing), `found` one bit
    /// per key (LSB first). Returns the number of missing keys.
    ///
    /// A base alone is the pipelined batch lookup of its file. With deltas, each key is
    /// first looked up in the deltas (small, newest first), and the keys none of them has
    /// go to the base's pipelined lookup as one batch.
    pub fn seek_batch(&self, keys: &[u64], out: &mut [u8], found: &mut [u8]) -> u32 {
        let base = &self.layers[0];
        if self.layers.len() == 1 {
            return base.seek_batch(keys, out, found);
        }
        let vb = self.value_bytes;
        found.fill(0);
        let mut missing = 0u32;
        let mut rest: Vec<usize> = Vec::new();
        'keys: for (q, &key) in keys.iter().enumerate() {
            for delta in self.deltas().iter().rev() {
                if let Some(i) = delta.find(key) {
                    let dst = &mut out[q * vb..(q + 1) * vb];
                    if delta.is_deleted(i) {
                        dst.fill(0);
                        missing += 1;
                    } else {
                        dst.copy_from_slice(delta.value(i));
                        found[q / 8] |= 1 << (q % 8);
                    }
                    continue 'keys;
                }
            }
            rest.push(q);
        }
        if rest.is_empty() {
            return missing;
        }
        let sub_keys: Vec<u64> = rest.iter().map(|&q| keys[q]).collect();
        let mut sub_out = vec![0u8; rest.len() * vb];
        let mut sub_found = vec![0u8; rest.len().div_ceil(8)];
        missing += base.seek_batch(&sub_keys, &mut sub_out, &mut sub_found);
        for (j, &q) in rest.iter().enumerate() {
            out[q * vb..(q + 1) * vb].copy_from_slice(&sub_out[j * vb..(j + 1) * vb]);
            if sub_found[j / 8] >> (j % 8) & 1 == 1 {
                found[q / 8] |= 1 << (q % 8);
            }
        }
        missing
    }
}
