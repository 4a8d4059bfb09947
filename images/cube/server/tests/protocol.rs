//! The two read protocols as the Python client (elasticctr_cube/client.py, protocol.py)
//! and Paddle Serving's Python client send them, and what malformed, oversized and hostile
//! input gets: an error answer (and, where the stream is lost, a closed connection),
//! never a panic.

mod common;

use base64::prelude::{Engine, BASE64_STANDARD};
use common::{binary_request, decode_answer, keys, serve, state, value_of, TempDir};
use cube_server::state::State;
use cube_server::{binary, http};
use serde_json::{json, Value};
use std::io::{BufReader, Cursor, Read};
use std::sync::Arc;

const DIM: usize = 3;
const MAX_KEYS: usize = 1000;

/// A server (as a State) holding version 5 of `keys(200, 11)`, and the keys.
fn serving(dir: &TempDir) -> (Arc<State>, Vec<u64>) {
    let stored = keys(200, 11);
    let state = state(MAX_KEYS);
    serve(&state, 5, &common::write_version(&dir.0, 5, &stored, DIM));
    (state, stored)
}

/// The bytes of the answers to `input` on one connection, and whether it stays open.
fn binary_exchange(state: &State, input: Vec<u8>) -> (Vec<u8>, std::io::Result<bool>) {
    let mut out = Vec::new();
    let mut scratch = binary::Scratch::default();
    let keep = binary::handle(&mut Cursor::new(input), &mut out, state, &mut scratch);
    (out, keep)
}

#[test]
fn binary_seek_as_the_python_client_sends_it() {
    let dir = TempDir::new("binary");
    let (state, stored) = serving(&dir);
    let mut batch = stored[..20].to_vec();
    batch[3] = 0; // absent
    for pinned in [None, Some(5)] {
        let (out, keep) = binary_exchange(&state, binary_request(&batch, pinned));
        assert!(matches!(keep, Ok(true)), "the connection stays open");
        let answer = decode_answer(&out);
        assert_eq!(
            (answer.status, answer.version, answer.dim, answer.missing),
            (0, 5, DIM, 1)
        );
        for (i, key) in batch.iter().enumerate() {
            let expected = if i == 3 {
                vec![0.0; DIM]
            } else {
                value_of(5, *key, DIM)
            };
            assert_eq!(
                (answer.found[i], &answer.values[i]),
                (i != 3, &expected),
                "key {i}"
            );
        }
    }
    let empty = decode_answer(&binary_exchange(&state, binary_request(&[], None)).0);
    assert_eq!((empty.status, empty.values.len()), (0, 0));
}

#[test]
fn binary_requests_split_into_small_reads_get_the_same_answer() {
    // TCP may deliver a request in pieces: a reader yielding 3 bytes at a time
    struct Trickle(Cursor<Vec<u8>>);
    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = buf.len().min(3);
            self.0.read(&mut buf[..n])
        }
    }
    let dir = TempDir::new("trickle");
    let (state, stored) = serving(&dir);
    let request = binary_request(&stored[..50], Some(5));
    let mut reader = BufReader::with_capacity(5, Trickle(Cursor::new(request.clone())));
    let mut out = Vec::new();
    let keep = binary::handle(
        &mut reader,
        &mut out,
        &state,
        &mut binary::Scratch::default(),
    );
    assert!(matches!(keep, Ok(true)));
    assert_eq!(out, binary_exchange(&state, request).0);
}

#[test]
fn binary_errors_answer_with_a_status_and_a_message() {
    let dir = TempDir::new("binary-errors");
    let (state, stored) = serving(&dir);
    let cases: [(Vec<u8>, u32, &str, bool); 4] = [
        (
            binary_request(&stored[..2], Some(4)),
            binary::UNKNOWN_VERSION,
            "version 4 is not held",
            true,
        ),
        (
            binary_request(&vec![1; MAX_KEYS + 1], None),
            binary::TOO_LARGE,
            "1001 keys exceeds the limit of 1000",
            false,
        ),
        (
            [b"\xcbXQ\x01".as_slice(), &[0; 20]].concat(),
            binary::BAD_REQUEST,
            "bad request magic",
            false,
        ),
        // a count of 2^32 - 1: answered from the header, nothing read or allocated
        (
            [
                &binary_request(&[], None)[..16],
                &u32::MAX.to_le_bytes(),
                &[0; 4],
            ]
            .concat(),
            binary::TOO_LARGE,
            "4294967295 keys",
            false,
        ),
    ];
    for (request, status, message, stays_open) in cases {
        let (out, keep) = binary_exchange(&state, request);
        let answer = decode_answer(&out);
        assert_eq!(answer.status, status, "{}", answer.message);
        assert!(
            answer.message.contains(message),
            "{:?} says {message:?}",
            answer.message
        );
        assert_eq!(keep.ok(), Some(stays_open), "{message}");
    }
    let empty = State::new(cube_server::state::Config {
        shard: 0,
        shard_num: 1,
        max_keys: 10,
        max_connections: 1,
    });
    let answer = decode_answer(&binary_exchange(&empty, binary_request(&[1], None)).0);
    assert_eq!(answer.status, binary::NOT_READY);
}

#[test]
fn a_binary_request_cut_short_is_an_io_error_not_a_panic() {
    let dir = TempDir::new("binary-short");
    let (state, stored) = serving(&dir);
    let request = binary_request(&stored[..10], None);
    for cut in [1, 10, 23, 24, 25, request.len() - 1] {
        let (out, keep) = binary_exchange(&state, request[..cut].to_vec());
        assert!(keep.is_err() && out.is_empty(), "cut at {cut}: {keep:?}");
    }
}

/// An HTTP exchange: (status code, body as JSON, connection kept) of the first answer.
fn http_exchange(state: &Arc<State>, port: http::Port, raw: &[u8]) -> (u16, Value, bool) {
    let mut out = Vec::new();
    let keep = http::handle(&mut Cursor::new(raw.to_vec()), &mut out, state, port)
        .expect("an answer was written");
    let text = String::from_utf8(out).expect("an HTTP answer is text");
    let (head, body) = text.split_once("\r\n\r\n").expect("a head and a body");
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status code");
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .and_then(|n| n.parse::<usize>().ok());
    assert_eq!(length, Some(body.len()), "Content-Length matches the body");
    let expected_connection = if keep { "keep-alive" } else { "close" };
    assert!(
        head.contains(&format!("Connection: {expected_connection}")),
        "{head}"
    );
    (
        code,
        serde_json::from_str(body).expect("the body is JSON"),
        keep,
    )
}

fn post(path: &str, body: &str) -> Vec<u8> {
    format!(
        "POST {path} HTTP/1.1\r\nHost: cube\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[test]
fn json_seek_as_paddle_serving_sends_it() {
    let dir = TempDir::new("json");
    let (state, stored) = serving(&dir);
    // numbers and decimal strings (Paddle's cube takes both), one absent key
    let body = json!({"keys": [stored[0], stored[1].to_string(), 0u64]}).to_string();
    let (code, answer, keep) =
        http_exchange(&state, http::Port::Data, &post("/DictService/seek", &body));
    assert_eq!((code, keep, &answer["version"]), (200, true, &json!(5)));
    let values = answer["values"].as_array().unwrap();
    for (i, key) in stored[..2].iter().enumerate() {
        assert_eq!(values[i]["status"], 0);
        let bytes = BASE64_STANDARD
            .decode(values[i]["value"].as_str().unwrap())
            .unwrap();
        let floats: Vec<f32> = bytes
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(floats, value_of(5, *key, DIM));
    }
    assert_eq!(values[2], json!({"status": 4294967295u32, "value": ""}));
    // pinned to a version held; the version as a string, as Paddle's cube sends it
    let pinned = json!({"keys": [stored[0]], "version": "5"}).to_string();
    assert_eq!(
        http_exchange(
            &state,
            http::Port::Data,
            &post("/DictService/seek", &pinned)
        )
        .0,
        200
    );
}

#[test]
fn keep_alive_and_close_follow_the_request() {
    let dir = TempDir::new("keepalive");
    let (state, _) = serving(&dir);
    let cases: [(&[u8], bool); 5] = [
        (b"GET /healthz HTTP/1.1\r\n\r\n", true),
        (b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n", false),
        (b"GET /healthz HTTP/1.0\r\n\r\n", false),
        (
            b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
            true,
        ),
        (b"\r\n\r\nGET /healthz HTTP/1.1\n\n", true), // blank lines first, bare LFs
    ];
    for (raw, keep) in cases {
        let (code, _, kept) = http_exchange(&state, http::Port::Data, raw);
        assert_eq!(
            (code, kept),
            (200, keep),
            "{:?}",
            String::from_utf8_lossy(raw)
        );
    }
    // two requests in one read: both answered, in order, on one connection
    let mut input = Cursor::new(
        [
            post("/DictService/seek", "{\"keys\":[1]}"),
            b"GET /readyz HTTP/1.1\r\n\r\n".to_vec(),
        ]
        .concat(),
    );
    let mut out = Vec::new();
    assert!(http::handle(&mut input, &mut out, &state, http::Port::Data).unwrap());
    assert!(http::handle(&mut input, &mut out, &state, http::Port::Data).unwrap());
    let text = String::from_utf8(out).unwrap();
    assert_eq!(text.matches("HTTP/1.1 200 OK").count(), 2, "{text}");
    assert!(text.ends_with("{\"ready\":true,\"version\":5}"), "{text}");
}

#[test]
fn malformed_and_hostile_http_is_answered_with_an_error() {
    let dir = TempDir::new("http-errors");
    let (state, _) = serving(&dir);
    let many_headers: String = (0..65).map(|i| format!("X-{i}: y\r\n")).collect();
    let long_header = format!("GET /healthz HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(70_000));
    let too_many_keys = json!({"keys": vec![1; MAX_KEYS + 1]}).to_string();
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (b"GARBAGE\r\n\r\n".to_vec(), 400, "malformed request"),
        (b"GET /healthz\r\n\r\n".to_vec(), 400, "malformed request"),
        (b"GET /he alth HTTP/1.1\r\n\r\n".to_vec(), 400, "malformed request"),
        (b"GET /healthz HTTP/1.1\r\nBad Header: x\r\n\r\n".to_vec(), 400, "malformed request"),
        (b"POST /DictService/seek HTTP/1.1\r\nContent-Length: -1\r\n\r\n".to_vec(), 400, "bad Content-Length"),
        (b"POST /DictService/seek HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n".to_vec(), 400, "bad Content-Length"),
        (b"POST /DictService/seek HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}".to_vec(), 400, "conflicting Content-Length"),
        (b"POST /DictService/seek HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n".to_vec(), 411, "chunked"),
        // the body's length is refused before it is read or allocated
        (b"POST /DictService/seek HTTP/1.1\r\nContent-Length: 1000000000000\r\n\r\n".to_vec(), 413, "exceeds the limit"),
        (format!("GET /healthz HTTP/1.1\r\n{many_headers}\r\n").into_bytes(), 431, "more than 64 header fields"),
        (long_header.into_bytes(), 431, "request header too large"),
        (post("/DictService/seek", "{\"keys\":"), 400, "body is not JSON"),
        (post("/DictService/seek", "[1, 2]"), 400, "must be a JSON object"),
        (post("/DictService/seek", "{\"keys\": 1}"), 400, "seek needs \"keys\""),
        (post("/DictService/seek", "{\"keys\": [1, -2]}"), 400, "keys[1] = -2 is not an unsigned 64-bit integer"),
        (post("/DictService/seek", "{\"keys\": [1.5]}"), 400, "keys[0] = 1.5"),
        (post("/DictService/seek", "{\"keys\": [\"18446744073709551616\"]}"), 400, "keys[0]"),
        (post("/DictService/seek", "{\"keys\": [[1]]}"), 400, "keys[0]"),
        (post("/DictService/seek", &too_many_keys), 413, "1001 keys exceeds the limit of 1000"),
        (post("/DictService/seek", "{\"keys\": [1], \"version\": \"x\"}"), 400, "must be an unsigned integer"),
        (post("/DictService/seek", "{\"keys\": [1], \"version\": 6}"), 409, "version 6 is not held"),
        (post("/DictService/seek", &"[".repeat(30_000)), 400, "recursion limit"), // deep nesting
        (b"GET /DictService/seek HTTP/1.1\r\n\r\n".to_vec(), 405, "needs POST"),
        (b"GET /nothing HTTP/1.1\r\n\r\n".to_vec(), 404, "no such endpoint"),
        (post("/control/switch", "{\"version\": 5}"), 403, "control port"),
        (post("/control/unload", "{}"), 403, "control port"),
    ];
    for (raw, code, message) in cases {
        let (got, body, _) = http_exchange(&state, http::Port::Data, &raw);
        let error = body["error"].as_str().unwrap_or_default();
        assert_eq!(
            got,
            code,
            "{error:?} for {:?}",
            String::from_utf8_lossy(&raw[..raw.len().min(120)])
        );
        assert!(error.contains(message), "{error:?} says {message:?}");
    }
    // a body cut short: the connection is lost (an I/O error), nothing panics
    let mut out = Vec::new();
    let short =
        b"POST /DictService/seek HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"keys\":[1]}".to_vec();
    assert!(http::handle(&mut Cursor::new(short), &mut out, &state, http::Port::Data).is_err());
    assert!(http::handle(
        &mut Cursor::new(b"GET /healthz HTTP/1.1\r\nHost".to_vec()),
        &mut out,
        &state,
        http::Port::Data
    )
    .is_err());
}

#[test]
fn version_changes_only_on_the_control_port() {
    let dir = TempDir::new("control");
    let (state, stored) = serving(&dir);
    let v6 = common::write_version(&dir.0, 6, &stored, DIM);
    let control = |raw: Vec<u8>| http_exchange(&state, http::Port::Control, &raw);
    let (code, body, _) = control(post(
        "/control/load",
        &json!({"version": 6, "path": v6}).to_string(),
    ));
    assert_eq!((code, &body["version"]), (202, &json!(6)), "{body}");
    assert_eq!(control(post("/DictService/seek", "{\"keys\":[1]}")).0, 404);
    assert_eq!(
        control(post("/control/load", "{\"path\": \"/x\"}")).1["error"],
        "load needs \"version\""
    );
    assert_eq!(control(post("/control/load", "{\"version\": 7}")).0, 400);
    assert_eq!(control(post("/control/switch", "{}")).0, 400);
    common::load(&state, 6, &v6); // waits for the load of 6 to end
    assert_eq!(
        control(post("/control/switch", "{\"version\": 6}")).1["result"],
        "switched"
    );
    assert_eq!(
        control(post("/control/unload", "{\"version\": 6}")).0,
        409,
        "6 is current"
    );
    assert_eq!(
        control(post("/control/unload", "{\"version\": 5}")).1["result"],
        "unloaded"
    );
    assert_eq!(
        control(b"GET /control/status HTTP/1.1\r\n\r\n".to_vec()).1["cur_version"],
        6
    );
}

/// Bytes from a fixed-seed generator (xorshift): the same "random" input every run.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

#[test]
fn random_bytes_never_panic_either_protocol() {
    let dir = TempDir::new("noise");
    let (state, stored) = serving(&dir);
    let templates = [
        binary_request(&stored[..4], Some(5)),
        post(
            "/DictService/seek",
            &json!({"keys": [stored[0], stored[1]], "version": 5}).to_string(),
        ),
        post(
            "/control/load",
            "{\"version\": 9, \"path\": \"/nonexistent\"}",
        ),
    ];
    for seed in 1..3000u64 {
        // pure noise, and valid requests with a few bytes overwritten or cut
        let mut input = noise(seed, (seed % 97) as usize + 1);
        if seed % 2 == 0 {
            let template = &templates[(seed / 2 % 3) as usize];
            let mut bytes = template.clone();
            for (i, b) in noise(seed * 7, 4).into_iter().enumerate() {
                let at = (b as usize * 31 + i * 17 + seed as usize) % bytes.len();
                bytes[at] = b;
            }
            bytes.truncate(bytes.len() - (seed as usize % 5));
            input = bytes;
        }
        let mut out = Vec::new();
        let mut reader = Cursor::new(input.clone());
        for port in [http::Port::Data, http::Port::Control] {
            reader.set_position(0);
            out.clear();
            let _ = if input[0] == binary::REQUEST_MAGIC[0] && port == http::Port::Data {
                binary::handle(
                    &mut reader,
                    &mut out,
                    &state,
                    &mut binary::Scratch::default(),
                )
            } else {
                http::handle(&mut reader, &mut out, &state, port)
            };
        }
    }
    // the server still answers afterwards
    assert_eq!(
        decode_answer(&binary_exchange(&state, binary_request(&stored[..1], None)).0).status,
        0
    );
}
