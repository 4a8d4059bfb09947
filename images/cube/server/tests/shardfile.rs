//! The shard file format: what the Python builder writes, the server reads back exactly;
//! a truncated, padded or corrupt file is refused with an error naming it and the fault.

mod common;

use common::{keys, reseal, shard_bytes, value_of, TempDir};
use cube_server::shardfile::ShardFile;

/// Written by the Python builder (`elasticctr_cube.shardfile.write_shard_file`): version 7,
/// shard 1 of 3, keys 1, 4, ..., 34 and 2^64 - 1, dim 3, values
/// [key % 1000, -(key % 7), 0.5]. Regenerate (from the repository root):
/// PYTHONPATH=images/cube:images/common python -c "import numpy as np; from
/// elasticctr_cube.shardfile import write_shard_file as w; k = np.array([3*i+1 for i in
/// range(12)] + [2**64-1], np.uint64); v = np.stack([(k % np.uint64(1000)).astype('f4'),
/// -(k % np.uint64(7)).astype('f4'), np.full(13, 0.5, 'f4')], 1); w('images/cube/server/
/// tests/fixtures/python-v7-shard1of3.cube', version=7, shard=1, shard_num=3, keys=k, values=v)"
const PYTHON_FILE: &[u8] = include_bytes!("fixtures/python-v7-shard1of3.cube");

fn python_keys() -> Vec<u64> {
    (0..12).map(|i| 3 * i + 1).chain([u64::MAX]).collect()
}

fn python_value(key: u64) -> Vec<f32> {
    vec![(key % 1000) as f32, -((key % 7) as f32), 0.5]
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn open_bytes(dir: &TempDir, bytes: &[u8]) -> Result<ShardFile, String> {
    ShardFile::open(&dir.write("shard.cube", bytes))
}

#[test]
fn a_file_written_by_the_python_builder_reads_back_exactly() {
    let dir = TempDir::new("python");
    let sf = open_bytes(&dir, PYTHON_FILE).expect("the Python builder's file loads");
    let header = (sf.version, sf.key_count, sf.shard, sf.shard_num, sf.dim);
    assert_eq!(header, (7, 13, 1, 3, 3));
    assert_eq!(sf.file_bytes, PYTHON_FILE.len() as u64);
    for key in python_keys() {
        let value = sf
            .get(key)
            .unwrap_or_else(|| panic!("key {key} is missing"));
        assert_eq!(floats(value), python_value(key), "value of key {key}");
    }
    for absent in [0, 2, 3, 35, u64::MAX - 1] {
        assert!(sf.get(absent).is_none(), "key {absent} is not in the file");
    }
}

#[test]
fn the_test_writer_writes_the_python_builders_bytes() {
    // The other tests build their files with common::shard_bytes: it must be the same
    // format as the builder's, byte for byte, or they would test another format.
    let values: Vec<Vec<f32>> = python_keys().into_iter().map(python_value).collect();
    assert!(shard_bytes(7, 1, 3, &python_keys(), &values) == PYTHON_FILE);
}

#[test]
fn a_batch_seek_answers_every_key_in_order_with_missing_ones_zero() {
    let dir = TempDir::new("batch");
    // 10,000 keys: 2,500 buckets (12 bits), sizes around the pipeline depth and beyond
    let stored = keys(10_000, 17);
    let values: Vec<Vec<f32>> = stored.iter().map(|&k| value_of(3, k, 5)).collect();
    let sf = open_bytes(&dir, &shard_bytes(3, 0, 1, &stored, &values)).unwrap();
    for n in [0, 1, 7, 8, 25, 1000] {
        // every third key is absent (stored keys + 1 are not stored keys here)
        let batch: Vec<u64> = (0..n)
            .map(|i| stored[i * 7 % stored.len()] + u64::from(i % 3 == 2))
            .collect();
        let mut out = vec![0xAAu8; n * sf.value_bytes];
        let mut found = vec![0xFFu8; n.div_ceil(8)];
        let missing = sf.seek_batch(&batch, &mut out, &mut found);
        assert_eq!(missing as usize, (0..n).filter(|i| i % 3 == 2).count());
        for (i, key) in batch.iter().enumerate() {
            let row = floats(&out[i * sf.value_bytes..(i + 1) * sf.value_bytes]);
            let hit = found[i / 8] >> (i % 8) & 1 == 1;
            if i % 3 == 2 {
                assert!(
                    !hit && row.iter().all(|&v| v == 0.0),
                    "key {i} of {n} is absent"
                );
            } else {
                assert!(hit, "key {i} of {n} is found");
                assert_eq!(row, value_of(3, *key, 5), "key {i} of {n}");
                assert_eq!(sf.get(*key).map(floats), Some(row));
            }
        }
    }
}

#[test]
fn one_key_and_no_keys_make_valid_files() {
    let dir = TempDir::new("tiny");
    let one = open_bytes(&dir, &shard_bytes(1, 0, 1, &[42], &[vec![1.5]])).unwrap();
    assert_eq!(one.get(42).map(floats), Some(vec![1.5]));
    assert!(one.get(43).is_none());
    let empty = open_bytes(&dir, &shard_bytes(1, 0, 1, &[], &[])).unwrap();
    assert_eq!(empty.key_count, 0);
    assert!(empty.get(42).is_none());
}

/// Open `bytes`; the error must name the file and contain `expected`.
fn refused(bytes: &[u8], expected: &str) {
    let dir = TempDir::new("bad");
    let path = dir.write("shard.cube", bytes);
    match ShardFile::open(&path) {
        Ok(_) => panic!("a file that should fail with {expected:?} loaded"),
        Err(msg) => {
            assert!(msg.starts_with(&path), "{msg:?} names the file {path}");
            assert!(msg.contains(expected), "{msg:?} says {expected:?}");
        }
    }
}

#[test]
fn a_truncated_or_padded_file_is_refused_before_its_checksum() {
    let good = PYTHON_FILE;
    refused(&[], "truncated: 0 bytes, shorter than the 64-byte header");
    refused(&good[..63], "truncated: 63 bytes");
    refused(&good[..64], "truncated: 64 bytes, the header describes 348");
    refused(
        &good[..good.len() - 1],
        "truncated: 347 bytes, the header describes 348",
    );
    refused(&[good, &[0]].concat(), "has trailing bytes: 349 bytes");
}

#[test]
fn a_corrupt_file_is_refused_naming_the_fault() {
    let good = PYTHON_FILE.to_vec();
    let with = |at: usize, byte: u8| {
        let mut bytes = good.clone();
        bytes[at] = byte;
        bytes
    };
    refused(&with(0, b'X'), "not a cube shard file (bad magic");
    refused(&with(16, 8), "corrupt header (header checksum mismatch)"); // version 7 -> 8
    refused(
        &with(good.len() - 1, good[good.len() - 1] ^ 1),
        "body checksum mismatch",
    );
    refused(&with(100, good[100] ^ 0x40), "body checksum mismatch"); // a key
                                                                     // past the checksums (resealed): the fields themselves are checked
    let sealed = |at: usize, byte: u8| {
        let mut bytes = with(at, byte);
        reseal(&mut bytes);
        bytes
    };
    refused(&sealed(8, 3), "unsupported shard file format 3");
    refused(&sealed(40, 0), "corrupt header (dim 0");
    refused(&sealed(44, 40), "corrupt header (dim 3, bucket_bits 40");
    refused(&sealed(32, 3), "shard 3/3");
    refused(&sealed(44, 3), "truncated"); // more buckets than the file holds
    refused(&sealed(68, 9), "corrupt bucket table"); // table entries out of order
    refused(&sealed(64, 1), "corrupt bucket table"); // does not start at key 0
}

#[test]
fn a_missing_file_is_refused() {
    let dir = TempDir::new("missing");
    let path = dir.0.join("nothing.cube");
    let msg = ShardFile::open(&path.to_string_lossy()).err().unwrap();
    assert!(msg.contains("nothing.cube: cannot open"), "{msg}");
}
