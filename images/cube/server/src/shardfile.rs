//! A shard file: immutable, memory-mapped, hash-bucketed key/value table.
//!
//! Layout (all integers little-endian; docs/cube.md has the full table):
//!   0  magic "ECUBESH1" | 8 format u32 = 1 | 12 header_len u32 = 64
//!  16  version u64 | 24 key_count u64 | 32 shard u32 | 36 shard_num u32
//!  40  dim u32 | 44 bucket_bits u32 | 48 body_crc32 u32 | 52 header_crc32 u32 | 56 reserved
//!  64  bucket table: (2^bucket_bits + 1) x u32, start index of each bucket in the key array
//!      padding to 8 bytes
//!      keys: key_count x u64, ordered by (bucket, key)
//!      values: key_count x dim x f32, same order
//! bucket(key) = mix64(key) >> (64 - bucket_bits); body_crc32 covers bytes [64, end).
//!
//! Format 2 is a delta on a parent version: the same layout, with the parent version
//! (u64) at offset 56, covered by the header checksum (bytes [0, 52) then [56, 64)), and
//! after the values one bit per key (LSB first): set where the key is deleted (its value
//! is zeros). A base (format 1) holds every key of its version.

use memmap2::{Mmap, MmapOptions};
use std::fs::File;

pub const MAGIC: &[u8; 8] = b"ECUBESH1";
pub const FORMAT: u32 = 1;
pub const DELTA_FORMAT: u32 = 2;
pub const HEADER_LEN: usize = 64;

/// splitmix64's finalizer: spreads any key set (sequential, all = s mod n) over the buckets.
#[inline(always)]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

pub struct ShardFile {
    pub path: String,
    pub version: u64,
    pub key_count: u64,
    pub shard: u32,
    pub shard_num: u32,
    pub dim: u32,
    pub value_bytes: usize,
    pub file_bytes: u64,
    /// A delta's parent version (format 2); None for a base.
    pub parent: Option<u64>,
    bucket_bits: u32,
    table_off: usize,
    keys_off: usize,
    values_off: usize,
    deleted_off: usize,
    map: Mmap,
}

/// The fields of a shard file's header that decide how to load it (read without mapping
/// the file: the server checks a delta's parent before it starts the load).
pub struct Header {
    pub version: u64,
    pub parent: Option<u64>,
}

fn check_header(h: &[u8], path: &str) -> Result<Header, String> {
    if &h[0..8] != MAGIC {
        return Err(format!(
            "{path}: not a cube shard file (bad magic {:?})",
            &h[0..8]
        ));
    }
    let format = u32_at(h, 8);
    if !(format == FORMAT || format == DELTA_FORMAT) || u32_at(h, 12) as usize != HEADER_LEN {
        return Err(format!("{path}: unsupported shard file format {format}"));
    }
    let mut crc = crc32fast::Hasher::new();
    crc.update(&h[0..52]);
    if format == DELTA_FORMAT {
        crc.update(&h[56..64]);
    }
    if crc.finalize() != u32_at(h, 52) {
        return Err(format!("{path}: corrupt header (header checksum mismatch)"));
    }
    Ok(Header {
        version: u64_at(h, 16),
        parent: (format == DELTA_FORMAT).then(|| u64_at(h, 56)),
    })
}

/// The header of the shard file at `path`, checked (magic, format, checksum).
pub fn read_header(path: &str) -> Result<Header, String> {
    use std::io::Read;
    let mut h = [0u8; HEADER_LEN];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut h))
        .map_err(|e| format!("{path}: cannot read the header: {e}"))?;
    check_header(&h, path)
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
}

impl ShardFile {
    /// Map `path`, check its header, size and CRC-32; every page ends up resident.
    pub fn open(path: &str) -> Result<ShardFile, String> {
        let file = File::open(path).map_err(|e| format!("{path}: cannot open: {e}"))?;
        let file_bytes = file
            .metadata()
            .map_err(|e| format!("{path}: cannot stat: {e}"))?
            .len();
        if file_bytes < HEADER_LEN as u64 {
            return Err(format!(
                "{path}: truncated: {file_bytes} bytes, shorter than the {HEADER_LEN}-byte header"
            ));
        }
        // SAFETY: shard files are immutable once published (written to a temporary name,
        // then renamed); nobody truncates or rewrites a file while it is mapped.
        let map = unsafe { MmapOptions::new().populate().map(&file) }
            .map_err(|e| format!("{path}: cannot map: {e}"))?;
        let h = &map[..HEADER_LEN];
        let Header { version, parent } = check_header(h, path)?;
        let key_count = u64_at(h, 24);
        let (shard, shard_num, dim, bucket_bits) =
            (u32_at(h, 32), u32_at(h, 36), u32_at(h, 40), u32_at(h, 44));
        let body_crc = u32_at(h, 48);
        if dim == 0 || bucket_bits > 32 || key_count > u32::MAX as u64 || shard >= shard_num {
            return Err(format!(
                "{path}: corrupt header (dim {dim}, bucket_bits {bucket_bits}, keys {key_count}, shard {shard}/{shard_num})"
            ));
        }
        let value_bytes = dim as usize * 4;
        let buckets = 1usize << bucket_bits;
        let table_off = HEADER_LEN;
        let keys_off = (table_off + (buckets + 1) * 4 + 7) & !7;
        let values_off = keys_off + key_count as usize * 8;
        let deleted_off = values_off + key_count as usize * value_bytes;
        let deleted_bytes = if parent.is_some() {
            key_count.div_ceil(8)
        } else {
            0
        };
        let expected = deleted_off as u64 + deleted_bytes;
        if file_bytes != expected {
            let what = if file_bytes < expected {
                "truncated"
            } else {
                "has trailing bytes"
            };
            return Err(format!(
                "{path}: {what}: {file_bytes} bytes, the header describes {expected}"
            ));
        }
        if crc32fast::hash(&map[HEADER_LEN..]) != body_crc {
            return Err(format!("{path}: corrupt data (body checksum mismatch)"));
        }
        let sf = ShardFile {
            path: path.to_string(),
            version,
            key_count,
            shard,
            shard_num,
            dim,
            value_bytes,
            file_bytes,
            bucket_bits,
            table_off,
            keys_off,
            values_off,
            deleted_off,
            parent,
            map,
        };
        let table = sf.table();
        if table[0] != 0
            || table[buckets] as u64 != key_count
            || table.windows(2).any(|w| w[0] > w[1])
        {
            return Err(format!("{path}: corrupt bucket table"));
        }
        Ok(sf)
    }

    #[inline(always)]
    fn table(&self) -> &[u32] {
        let n = (1usize << self.bucket_bits) + 1;
        // SAFETY: the map is page-aligned, table_off is a multiple of 4, size was checked.
        unsafe {
            std::slice::from_raw_parts(self.map.as_ptr().add(self.table_off) as *const u32, n)
        }
    }

    #[inline(always)]
    fn keys(&self) -> &[u64] {
        // SAFETY: keys_off is a multiple of 8 within a page-aligned map; size was checked.
        unsafe {
            std::slice::from_raw_parts(
                self.map.as_ptr().add(self.keys_off) as *const u64,
                self.key_count as usize,
            )
        }
    }

    #[inline(always)]
    fn bucket(&self, key: u64) -> usize {
        if self.bucket_bits == 0 {
            0
        } else {
            (mix64(key) >> (64 - self.bucket_bits)) as usize
        }
    }

    /// The index of `key` in this file (for a delta: an upsert or a deletion), if present.
    #[inline]
    pub fn find(&self, key: u64) -> Option<usize> {
        let b = self.bucket(key);
        let t = self.table();
        let (lo, hi) = (t[b] as usize, t[b + 1] as usize);
        let keys = self.keys();
        (lo..hi).find(|&i| keys[i] == key)
    }

    /// Whether the key at index `i` is a deletion (only deltas hold deletions).
    #[inline]
    pub fn is_deleted(&self, i: usize) -> bool {
        self.parent.is_some() && self.map[self.deleted_off + i / 8] >> (i % 8) & 1 == 1
    }

    /// The value bytes of `key` in a base, if present.
    pub fn get(&self, key: u64) -> Option<&[u8]> {
        self.find(key).map(|i| self.value(i))
    }

    #[inline(always)]
    pub fn value(&self, i: usize) -> &[u8] {
        let off = self.values_off + i * self.value_bytes;
        &self.map[off..off + self.value_bytes]
    }

    /// Look up a batch: `out` gets keys.len() values (zeros where missing), `found` one bit
    /// per key (LSB first). Returns the number of missing keys.
    ///
    /// The three dependent memory reads of a lookup (bucket table, key run, value) are
    /// software-pipelined: while key j is compared, the key run of key j + D and the table
    /// entry of key j + 2D are being prefetched, so cache misses of ~3D keys overlap.
    pub fn seek_batch(&self, keys: &[u64], out: &mut [u8], found: &mut [u8]) -> u32 {
        const D: usize = 8;
        let (vb, n) = (self.value_bytes, keys.len());
        let (table, all_keys) = (self.table(), self.keys());
        let values = self.map.as_ptr().wrapping_add(self.values_off);
        found.fill(0);
        let mut missing = 0u32;
        // ring buffers of the in-flight stages, indexed by key position % RING
        const RING: usize = 4 * D;
        let mut bucket = [0usize; RING];
        let mut slot = [usize::MAX; RING];
        for j in 0..n + 3 * D {
            if j < n {
                bucket[j % RING] = self.bucket(keys[j]);
                prefetch(table.as_ptr().wrapping_add(bucket[j % RING]) as *const u8);
            }
            if j >= D && j - D < n {
                let lo = table[bucket[(j - D) % RING]] as usize;
                prefetch(all_keys.as_ptr().wrapping_add(lo) as *const u8);
            }
            if j >= 2 * D && j - 2 * D < n {
                let q = j - 2 * D;
                let b = bucket[q % RING];
                let (lo, hi) = (table[b] as usize, table[b + 1] as usize);
                let at = (lo..hi)
                    .find(|&i| all_keys[i] == keys[q])
                    .unwrap_or(usize::MAX);
                slot[q % RING] = at;
                if at != usize::MAX {
                    let p = values.wrapping_add(at * vb);
                    prefetch(p);
                    prefetch(p.wrapping_add(vb - 1));
                }
            }
            if j >= 3 * D {
                let q = j - 3 * D;
                let dst = &mut out[q * vb..(q + 1) * vb];
                match slot[q % RING] {
                    usize::MAX => {
                        dst.fill(0);
                        missing += 1;
                    }
                    at => {
                        dst.copy_from_slice(self.value(at));
                        found[q / 8] |= 1 << (q % 8);
                    }
                }
            }
        }
        missing
    }
}

#[inline(always)]
fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetch is a hint; it never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch(p as *const i8, std::arch::x86_64::_MM_HINT_T0);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(not(target_endian = "little"))]
compile_error!("cube shard files are little-endian and mapped as-is: little-endian hosts only");
