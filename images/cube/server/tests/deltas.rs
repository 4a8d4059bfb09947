//! Deltas: a version made of a base and the deltas on it answers exactly as the full
//! version does (random updates, inserts and deletions); a delta is applied only on its
//! own parent; a chain loads from a base after a restart.

mod common;

use common::{binary_request, decode_answer, delta_bytes, shard_bytes, state, status, TempDir};
use cube_server::binary;
use cube_server::state::State;
use std::collections::BTreeMap;
use std::io::Cursor;
use std::sync::Arc;

const DIM: usize = 3;

fn seek(state: &State, keys: &[u64], version: Option<u64>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut scratch = binary::Scratch::default();
    binary::handle(
        &mut Cursor::new(binary_request(keys, version)),
        &mut out,
        state,
        &mut scratch,
    )
    .expect("seek answered");
    out
}

/// xorshift64*: the tests' own deterministic random numbers.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn value(&mut self) -> Vec<f32> {
        (0..DIM)
            .map(|_| f32::from_bits(self.next() as u32 & 0x3fff_ffff))
            .collect()
    }
}

fn table_bytes(version: u64, table: &BTreeMap<u64, Vec<f32>>) -> Vec<u8> {
    let keys: Vec<u64> = table.keys().copied().collect();
    let values: Vec<Vec<f32>> = table.values().cloned().collect();
    shard_bytes(version, 0, 1, &keys, &values)
}

fn load_ok(state: &Arc<State>, version: u64, paths: Vec<String>) {
    state.start_load(version, paths).expect("load accepted");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let load = status(state)["load"].clone();
        match load["state"].as_str() {
            Some("loaded") => return,
            Some("loading") => {}
            _ => panic!("load of {version} ended {load}"),
        }
        assert!(std::time::Instant::now() < deadline, "load still running");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

#[test]
fn base_plus_random_deltas_answers_bit_for_bit_as_the_full_version() {
    for seed in [1u64, 7, 42, 1234] {
        let mut rng = Rng(seed * 0x9e37_79b9 + 1);
        let dir = TempDir::new("prop");
        let mut table: BTreeMap<u64, Vec<f32>> = BTreeMap::new();
        for _ in 0..500 + rng.below(500) {
            let (k, v) = (rng.next(), rng.value());
            table.insert(k, v);
        }
        let mut ever: Vec<u64> = table.keys().copied().collect();
        let base = dir.write("v1.cube", &table_bytes(1, &table));
        let (serving, full) = (state(100_000), state(100_000));
        load_ok(&serving, 1, vec![base.clone()]);
        serving.switch(1).unwrap();
        let mut chain = vec![base];
        for version in 2..=12u64 {
            // updates, inserts, deletions (also of keys absent: a no-op), and a key
            // deleted then inserted again in a later delta
            let (mut keys, mut values, mut deleted) = (vec![], vec![], vec![]);
            let present: Vec<u64> = table.keys().copied().collect();
            let mut touched = std::collections::HashSet::new();
            for _ in 0..rng.below(120) {
                let key = match rng.below(4) {
                    0 | 1 if !present.is_empty() => {
                        present[rng.below(present.len() as u64) as usize]
                    }
                    2 if !ever.is_empty() => ever[rng.below(ever.len() as u64) as usize],
                    _ => rng.next(),
                };
                if !touched.insert(key) {
                    continue;
                }
                ever.push(key);
                keys.push(key);
                if rng.below(3) == 0 {
                    table.remove(&key);
                    values.push(vec![0.0; DIM]);
                    deleted.push(true);
                } else {
                    let v = rng.value();
                    table.insert(key, v.clone());
                    values.push(v);
                    deleted.push(false);
                }
            }
            let delta = dir.write(
                &format!("d{version}.cube"),
                &delta_bytes(version, version - 1, 0, 1, &keys, &values, &deleted),
            );
            load_ok(&serving, version, vec![delta.clone()]);
            serving.switch(version).unwrap();
            chain.push(delta);
            let whole = dir.write(&format!("v{version}.cube"), &table_bytes(version, &table));
            load_ok(&full, version, vec![whole]);
            full.switch(version).unwrap();
            let s = status(&serving);
            assert_eq!(
                s["current"]["chain"].as_array().unwrap().len(),
                version as usize
            );
            for batch in ever.chunks(97) {
                assert_eq!(
                    seek(&serving, batch, None),
                    seek(&full, batch, None),
                    "seed {seed}, version {version}: base + deltas answers as the full version"
                );
                let http = |st: &State| {
                    let keys: Vec<_> = batch
                        .iter()
                        .map(|&k| st.dict_for(None).unwrap().get(k).map(<[u8]>::to_vec))
                        .collect();
                    keys
                };
                assert_eq!(
                    http(&serving),
                    http(&full),
                    "seed {seed}: single-key lookups"
                );
            }
        }
        // a restarted server: the chain from the base in one load
        let restarted = state(100_000);
        load_ok(&restarted, 12, chain.clone());
        restarted.switch(12).unwrap();
        for batch in ever.chunks(101) {
            assert_eq!(
                seek(&restarted, batch, None),
                seek(&full, batch, None),
                "seed {seed}: the chain loaded after a restart"
            );
        }
    }
}

#[test]
fn a_delta_is_applied_only_on_its_own_parent() {
    let dir = TempDir::new("parent");
    let keys = [5u64, 6, 7];
    let values = vec![vec![1.0; DIM]; 3];
    let v1 = dir.write("v1.cube", &shard_bytes(1, 0, 1, &keys, &values));
    let d2 = dir.write(
        "d2.cube",
        &delta_bytes(2, 1, 0, 1, &[5], &[vec![2.0; DIM]], &[false]),
    );
    let d3 = dir.write(
        "d3.cube",
        &delta_bytes(3, 2, 0, 1, &[6], &[vec![0.0; DIM]], &[true]),
    );
    let st = state(1000);
    // nothing held: a delta is refused before anything is dropped
    let refused = st.start_load(2, vec![d2.clone()]).unwrap_err();
    assert_eq!(refused.0, 409);
    assert!(
        refused
            .1
            .contains("is a delta on version 1, which this shard does not hold"),
        "{}",
        refused.1
    );
    load_ok(&st, 1, vec![v1.clone()]);
    st.switch(1).unwrap();
    // 3 is a delta on 2, not on the 1 that is held
    let refused = st.start_load(3, vec![d3.clone()]).unwrap_err();
    assert!(refused.1.contains("delta on version 2"), "{}", refused.1);
    assert_eq!(status(&st)["cur_version"], 1);
    // a chain with a gap fails in the load and leaves version 1 serving
    st.start_load(3, vec![v1.clone(), d3.clone()]).unwrap();
    let end = wait_load(&st);
    assert_eq!(end["state"], "failed");
    assert!(
        end["error"]
            .as_str()
            .unwrap()
            .contains("is a delta on version 2, not on version 1"),
        "{end}"
    );
    // a base in the middle of a chain is no delta
    st.start_load(3, vec![d2.clone(), v1.clone()]).unwrap();
    let end = wait_load(&st);
    assert!(
        end["error"]
            .as_str()
            .unwrap()
            .contains("is a base, not a delta on version 2"),
        "{end}"
    );
    // the delta's parent is covered by the header checksum
    let mut bytes = std::fs::read(&d2).unwrap();
    bytes[56] ^= 1;
    let bad = dir.write("bad.cube", &bytes);
    st.start_load(2, vec![v1.clone(), bad]).unwrap();
    assert!(wait_load(&st)["error"]
        .as_str()
        .unwrap()
        .contains("header checksum mismatch"));
    // applied on its parent, it shares the files of the parent
    load_ok(&st, 2, vec![d2.clone()]);
    st.switch(2).unwrap();
    load_ok(&st, 3, vec![d3]);
    let (two, three) = (st.dict_for(Some(2)).unwrap(), st.dict_for(Some(3)).unwrap());
    assert!(
        Arc::ptr_eq(&two.layers[0], &three.layers[0])
            && Arc::ptr_eq(&two.layers[1], &three.layers[1])
    );
    assert_eq!(three.chain(), vec![1, 2, 3]);
    let answer = decode_answer(&seek(&st, &[5, 6, 7], Some(3)));
    assert_eq!(answer.found, vec![true, false, true]);
    assert_eq!(answer.values[0], vec![2.0; DIM]);
    assert_eq!(answer.values[1], vec![0.0; DIM], "a deleted key is missing");
    assert_eq!(status(&st)["background"]["delta_keys"], 2);
}

fn wait_load(st: &Arc<State>) -> serde_json::Value {
    loop {
        let load = status(st)["load"].clone();
        if load["state"] != "loading" {
            return load;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}
