//! Shared by the integration tests: shard files written the way the Python builder
//! writes them (elasticctr_cube/shardfile.py, `write_shard_file`), temporary files, a
//! State to drive, and the request/answer bytes of the binary protocol.
#![allow(dead_code)] // each test file uses its own part of this module

use cube_server::shardfile::{mix64, HEADER_LEN, MAGIC};
use cube_server::state::{Config, State};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const KEYS_PER_BUCKET: usize = 4;

/// `bucket_bits_for`: the smallest power-of-two bucket count with <= 4 keys per bucket.
pub fn bucket_bits_for(key_count: usize) -> u32 {
    let buckets = key_count.div_ceil(KEYS_PER_BUCKET).max(1);
    usize::BITS - (buckets - 1).leading_zeros()
}

fn bucket_of(key: u64, bits: u32) -> usize {
    if bits == 0 {
        0
    } else {
        (mix64(key) >> (64 - bits)) as usize
    }
}

/// The bytes `write_shard_file` writes for these keys and values (`values[i]` is key i's).
pub fn shard_bytes(
    version: u64,
    shard: u32,
    shard_num: u32,
    keys: &[u64],
    values: &[Vec<f32>],
) -> Vec<u8> {
    file_bytes(version, None, shard, shard_num, keys, values, &[])
}

/// The bytes of a delta on `parent` (format 2), as `write_shard_file(parent=...)` writes
/// them: `deleted[i]` marks key i as deleted (its value is written as zeros).
pub fn delta_bytes(
    version: u64,
    parent: u64,
    shard: u32,
    shard_num: u32,
    keys: &[u64],
    values: &[Vec<f32>],
    deleted: &[bool],
) -> Vec<u8> {
    file_bytes(
        version,
        Some(parent),
        shard,
        shard_num,
        keys,
        values,
        deleted,
    )
}

fn file_bytes(
    version: u64,
    parent: Option<u64>,
    shard: u32,
    shard_num: u32,
    keys: &[u64],
    values: &[Vec<f32>],
    deleted: &[bool],
) -> Vec<u8> {
    let dim = values.first().map_or(1, Vec::len);
    let bits = bucket_bits_for(keys.len());
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by_key(|&i| (bucket_of(keys[i], bits), keys[i]));
    let mut table = vec![0u32; (1 << bits) + 1];
    for &i in &order {
        table[bucket_of(keys[i], bits) + 1] += 1;
    }
    for b in 1..table.len() {
        table[b] += table[b - 1];
    }
    let mut body = Vec::new();
    for t in &table {
        body.extend_from_slice(&t.to_le_bytes());
    }
    body.resize(
        (HEADER_LEN + body.len()).next_multiple_of(8) - HEADER_LEN,
        0,
    );
    for &i in &order {
        body.extend_from_slice(&keys[i].to_le_bytes());
    }
    for &i in &order {
        assert_eq!(values[i].len(), dim, "every value has `dim` floats");
        let gone = deleted.get(i).copied().unwrap_or(false);
        for v in &values[i] {
            body.extend_from_slice(&if gone { 0.0 } else { *v }.to_le_bytes());
        }
    }
    if parent.is_some() {
        let mut bits = vec![0u8; order.len().div_ceil(8)];
        for (at, &i) in order.iter().enumerate() {
            if deleted.get(i).copied().unwrap_or(false) {
                bits[at / 8] |= 1 << (at % 8);
            }
        }
        body.extend_from_slice(&bits);
    }
    let mut head = Vec::with_capacity(HEADER_LEN);
    head.extend_from_slice(MAGIC);
    let format = if parent.is_some() { 2u32 } else { 1 };
    for field in [format, HEADER_LEN as u32] {
        head.extend_from_slice(&field.to_le_bytes());
    }
    head.extend_from_slice(&version.to_le_bytes());
    head.extend_from_slice(&(keys.len() as u64).to_le_bytes());
    for field in [shard, shard_num, dim as u32, bits, crc32fast::hash(&body)] {
        head.extend_from_slice(&field.to_le_bytes());
    }
    let parent_bytes = parent.unwrap_or(0).to_le_bytes();
    let mut crc = crc32fast::Hasher::new();
    crc.update(&head);
    if parent.is_some() {
        crc.update(&parent_bytes);
    }
    head.extend_from_slice(&crc.finalize().to_le_bytes());
    head.extend_from_slice(&parent_bytes);
    head.extend_from_slice(&body);
    head
}

/// Rewrite both checksums of a shard file's bytes (to make a file corrupt in one field
/// only, past the checksums).
pub fn reseal(bytes: &mut [u8]) {
    let body_crc = crc32fast::hash(&bytes[HEADER_LEN..]);
    bytes[48..52].copy_from_slice(&body_crc.to_le_bytes());
    let header_crc = crc32fast::hash(&bytes[..52]);
    bytes[52..56].copy_from_slice(&header_crc.to_le_bytes());
}

/// The value the tests store for `key` in `version`: each float names both, so an
/// answer that mixes versions or keys is seen.
pub fn value_of(version: u64, key: u64, dim: usize) -> Vec<f32> {
    (0..dim)
        .map(|j| match j {
            0 => version as f32,
            1 => (key % 1_000_000) as f32,
            _ => j as f32,
        })
        .collect()
}

/// Deterministic distinct keys spread over u64 (a multiplicative sequence, odd step).
pub fn keys(n: usize, seed: u64) -> Vec<u64> {
    (1..=n as u64)
        .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(seed))
        .collect()
}

/// A directory for this test's files, removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "cube-server-test-{}-{name}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn write(&self, name: &str, bytes: &[u8]) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, bytes).unwrap();
        path.to_string_lossy().into_owned()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Write shard 0 of 1 holding `keys` at `version` (values from `value_of`).
pub fn write_version(dir: &Path, version: u64, keys: &[u64], dim: usize) -> String {
    let values: Vec<Vec<f32>> = keys.iter().map(|&k| value_of(version, k, dim)).collect();
    let path = dir.join(format!("v{version}.cube"));
    std::fs::write(&path, shard_bytes(version, 0, 1, keys, &values)).unwrap();
    path.to_string_lossy().into_owned()
}

pub fn state(max_keys: usize) -> Arc<State> {
    Arc::new(State::new(Config {
        shard: 0,
        shard_num: 1,
        max_keys,
        max_connections: 16,
    }))
}

/// The server's status, parsed.
pub fn status(state: &State) -> serde_json::Value {
    serde_json::from_str(&state.status_json()).expect("status is JSON")
}

/// Start loading `path` as `version` and wait (generously) until the load ended;
/// the load's final state ("loaded", "failed", ...) and its error.
pub fn load(state: &Arc<State>, version: u64, path: &str) -> (String, Option<String>) {
    state
        .start_load(version, vec![path.to_string()])
        .expect("load accepted");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let load = status(state)["load"].clone();
        if load["state"] != "loading" {
            return (
                load["state"].as_str().unwrap_or_default().to_string(),
                load["error"].as_str().map(str::to_string),
            );
        }
        assert!(
            Instant::now() < deadline,
            "load of {path} still running after 60 s: {load}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Load `version` and make it current.
pub fn serve(state: &Arc<State>, version: u64, path: &str) {
    assert_eq!(load(state, version, path), ("loaded".to_string(), None));
    state.switch(version).expect("switch to the loaded version");
}

/// A binary request as the Python client's `encode_request` writes it.
pub fn binary_request(keys: &[u64], version: Option<u64>) -> Vec<u8> {
    let mut out = vec![0xCB, b'C', b'Q', 1];
    out.extend_from_slice(&u32::from(version.is_some()).to_le_bytes());
    out.extend_from_slice(&version.unwrap_or(0).to_le_bytes());
    out.extend_from_slice(&(keys.len() as u32).to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    for k in keys {
        out.extend_from_slice(&k.to_le_bytes());
    }
    out
}

/// A binary answer, decoded as the Python client's `decode_header`/`decode_body` do.
#[derive(Debug)]
pub struct Answer {
    pub status: u32,
    pub version: u64,
    pub dim: usize,
    pub missing: u32,
    /// status 0: one row per key (zeros where missing)
    pub values: Vec<Vec<f32>>,
    pub found: Vec<bool>,
    /// status != 0: the error message
    pub message: String,
}

pub fn decode_answer(bytes: &[u8]) -> Answer {
    let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
    assert!(
        bytes.len() >= 32,
        "answer shorter than its header: {bytes:?}"
    );
    assert_eq!(&bytes[0..4], &[0xCB, b'C', b'R', 1], "response magic");
    let (status, count, dim) = (u32_at(4), u32_at(16) as usize, u32_at(20) as usize);
    let version = u64::from_le_bytes(bytes[8..16].try_into().unwrap());
    let body = &bytes[32..];
    if status != 0 {
        assert_eq!(
            body.len(),
            count,
            "an error answer carries `count` message bytes"
        );
        return Answer {
            status,
            version,
            dim,
            missing: u32_at(24),
            values: vec![],
            found: vec![],
            message: String::from_utf8(body.to_vec()).unwrap(),
        };
    }
    assert_eq!(body.len(), count * dim * 4 + count.div_ceil(8), "body size");
    let floats: Vec<f32> = body[..count * dim * 4]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let bits = &body[count * dim * 4..];
    Answer {
        status,
        version,
        dim,
        missing: u32_at(24),
        values: floats.chunks(dim.max(1)).map(<[f32]>::to_vec).collect(),
        found: (0..count)
            .map(|i| bits[i / 8] >> (i % 8) & 1 == 1)
            .collect(),
        message: String::new(),
    }
}
