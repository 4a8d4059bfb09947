//! Two versions held at once: loading version 2 while 1 serves, switching between them
//! under readers (no answer ever mixes versions), unloading, and loads that fail.

mod common;

use common::{binary_request, decode_answer, keys, load, serve, state, status, value_of, TempDir};
use cube_server::binary;
use cube_server::state::State;
use std::io::Cursor;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

const DIM: usize = 4;

/// One binary seek, as a reader on its own connection sends it.
fn seek(state: &State, keys: &[u64], version: Option<u64>) -> common::Answer {
    let mut out = Vec::new();
    let mut scratch = binary::Scratch::default();
    let keep = binary::handle(
        &mut Cursor::new(binary_request(keys, version)),
        &mut out,
        state,
        &mut scratch,
    );
    assert!(keep.is_ok(), "{keep:?}");
    decode_answer(&out)
}

/// Every row of an answer is the value of its key in the answer's version.
fn check_whole(answer: &common::Answer, keys: &[u64]) {
    assert_eq!(answer.status, 0, "{}", answer.message);
    for (row, key) in answer.values.iter().zip(keys) {
        assert_eq!(
            row,
            &value_of(answer.version, *key, DIM),
            "an answer of version {} holds another version's value",
            answer.version
        );
    }
}

#[test]
fn readers_never_see_a_mix_while_versions_load_switch_and_unload() {
    let dir = TempDir::new("swap");
    let stored = keys(20_000, 5);
    let (v1, v2) = (
        common::write_version(&dir.0, 1, &stored, DIM),
        common::write_version(&dir.0, 2, &stored, DIM),
    );
    let state = state(100_000);
    serve(&state, 1, &v1);
    let stop = Arc::new(AtomicBool::new(false));
    // unpinned readers take whatever is current; pinned ones ask for version 1 only
    let readers: Vec<_> = (0..4)
        .map(|r| {
            let (state, stop, stored) = (Arc::clone(&state), Arc::clone(&stop), stored.clone());
            std::thread::spawn(move || {
                let pinned = (r % 2 == 1).then_some(1);
                let mut seen = [0u64; 3];
                let mut i = 0;
                while !stop.load(SeqCst) {
                    let batch: Vec<u64> = (0..500)
                        .map(|j| stored[(i * 500 + j * 13) % stored.len()])
                        .collect();
                    let answer = seek(&state, &batch, pinned);
                    check_whole(&answer, &batch);
                    if pinned.is_some() {
                        assert_eq!(
                            answer.version, 1,
                            "a reader pinned to 1 got another version"
                        );
                    }
                    seen[answer.version as usize] += 1;
                    i += 1;
                }
                seen
            })
        })
        .collect();
    // version 2 loads while 1 serves: nothing changes for the readers until the switch
    assert_eq!(load(&state, 2, &v2), ("loaded".to_string(), None));
    let s = status(&state);
    assert_eq!(
        (s["cur_version"].as_u64(), s["bg_version"].as_u64()),
        (Some(1), Some(2))
    );
    // switch back and forth until both kinds of reader have read during the switches
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut switches = 0;
    while switches < 200 || (Instant::now() < deadline && switches < 20_000) {
        let to = if switches % 2 == 0 { 2 } else { 1 };
        assert_eq!(state.switch(to), Ok("switched"));
        switches += 1;
        std::thread::sleep(Duration::from_micros(200));
        if switches >= 200 && status(&state)["requests"].as_u64().unwrap_or(0) > 400 {
            break;
        }
    }
    stop.store(true, SeqCst);
    let seen: Vec<[u64; 3]> = readers.into_iter().map(|r| r.join().unwrap()).collect();
    let unpinned: u64 = seen.iter().step_by(2).map(|s| s[1].min(s[2])).sum();
    assert!(unpinned > 0, "unpinned readers saw both versions: {seen:?}");
    // version 2 current again, then 1 (background now) is unloaded
    if state.current_version() != Some(2) {
        state.switch(2).unwrap();
    }
    assert_eq!(state.unload(Some(1)), Ok("unloaded"));
    let answer = seek(&state, &stored[..10], Some(1));
    assert_eq!(answer.status, binary::UNKNOWN_VERSION);
    assert!(
        answer.message.contains("version 1 is not held"),
        "{}",
        answer.message
    );
    check_whole(&seek(&state, &stored[..10], None), &stored[..10]);
    let s = status(&state);
    assert_eq!(
        (s["cur_version"].as_u64(), s["bg_version"].as_u64()),
        (Some(2), None)
    );
}

#[test]
fn a_reader_that_took_a_version_keeps_it_through_its_unload() {
    let dir = TempDir::new("keep");
    let stored = keys(100, 9);
    let state = state(1000);
    serve(&state, 1, &common::write_version(&dir.0, 1, &stored, DIM));
    serve(&state, 2, &common::write_version(&dir.0, 2, &stored, DIM));
    let taken = state.dict_for(Some(1)).expect("1 is held (background)");
    assert_eq!(state.unload(Some(1)), Ok("unloaded"));
    assert_eq!(state.dict_for(Some(1)).err().map(|e| e.0), Some(409));
    // the unloaded version's map stays valid while a seek still reads it
    let value: Vec<f32> = taken
        .get(stored[3])
        .unwrap()
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(value, value_of(1, stored[3], DIM));
}

#[test]
fn loads_that_fail_leave_the_serving_version_alone() {
    let dir = TempDir::new("fail");
    let stored = keys(50, 1);
    let state = state(1000);
    serve(&state, 1, &common::write_version(&dir.0, 1, &stored, DIM));
    let v2 = common::write_version(&dir.0, 2, &stored, DIM);
    let other_shard = dir.write(
        "shard1.cube",
        &common::shard_bytes(3, 1, 2, &stored, &vec![vec![0.0]; stored.len()]),
    );
    let missing = dir.0.join("missing.cube").to_string_lossy().into_owned();
    for (version, path, error) in [
        (3, v2.as_str(), "holds version 2, asked to load version 3"),
        (
            3,
            other_shard.as_str(),
            "is shard 1 of 2, this server is shard 0 of 1",
        ),
        (3, missing.as_str(), "cannot open"),
    ] {
        let (result, message) = load(&state, version, path);
        assert_eq!(result, "failed", "load of {path} as {version}");
        assert!(
            message.as_deref().unwrap_or("").contains(error),
            "{message:?} says {error:?}"
        );
        assert_eq!(state.current_version(), Some(1));
        check_whole(&seek(&state, &stored, None), &stored);
        assert_eq!(
            state.switch(3).map_err(|e| e.0),
            Err(409),
            "nothing to switch to"
        );
    }
    assert_eq!(
        state.unload(Some(1)).map_err(|e| e.0),
        Err(409),
        "1 is current"
    );
}

#[test]
fn an_unload_during_a_load_cancels_it() {
    let dir = TempDir::new("cancel");
    // 24 MB: its load (map, CRC pass) takes milliseconds, its recorded time is not 0.000
    let stored = keys(1_000_000, 3);
    let state = state(1000);
    let v1 = common::write_version(&dir.0, 1, &stored, DIM);
    assert_eq!(state.start_load(1, vec![v1.clone()]), Ok("loading"));
    let again = state.start_load(1, vec![v1.clone()]);
    assert!(
        matches!(again, Ok("already loading" | "already held")),
        "{again:?}"
    );
    let unload = state.unload(None);
    // a load ends by recording its time, cancelled or not: wait for that
    let deadline = Instant::now() + Duration::from_secs(60);
    while status(&state)["load"]["seconds"].as_f64() == Some(0.0) {
        assert!(Instant::now() < deadline, "the load never ended");
        std::thread::sleep(Duration::from_millis(5));
    }
    let s = status(&state);
    match unload {
        Ok("load cancelled") => assert_eq!(s["load"]["state"], "cancelled"),
        Ok("unloaded") => assert_eq!(s["load"]["state"], "loaded"), // it had finished
        other => panic!("unload during a load: {other:?}"),
    }
    assert!(
        s["bg_version"].is_null(),
        "a cancelled or unloaded version is not held: {s}"
    );
    assert_eq!(
        load(&state, 1, &v1),
        ("loaded".to_string(), None),
        "loads again"
    );
}
