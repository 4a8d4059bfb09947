//! `GET /metrics`: the counters, the latency histogram and the held versions as the
//! seeks and loads left them, in OpenMetrics text (the names are checked against the
//! contract from Python, tests/images/common/test_metrics_contract.py).

mod common;

use common::{binary_request, keys, serve, state, TempDir};
use cube_server::{binary, http};
use std::io::Cursor;

/// The value of the sample written exactly as `series` (name and labels).
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no sample {series} in:\n{text}"))
        .parse()
        .unwrap()
}

fn scrape(state: &std::sync::Arc<cube_server::state::State>) -> (String, String) {
    let mut out = Vec::new();
    let raw = b"GET /metrics HTTP/1.1\r\nHost: cube\r\n\r\n";
    http::handle(
        &mut Cursor::new(raw.to_vec()),
        &mut out,
        state,
        http::Port::Data,
    )
    .unwrap();
    let text = String::from_utf8(out).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    (head.to_string(), body.to_string())
}

#[test]
fn metrics_count_seeks_keys_misses_and_show_the_held_versions() {
    let dir = TempDir::new("metrics");
    let state = state(1000);
    let (head, before) = scrape(&state);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.contains("Content-Type: application/openmetrics-text; version=1.0.0"),
        "{head}"
    );
    assert!(before.ends_with("# EOF\n"), "{before}");
    let p = "elasticctr_cube_server_";
    assert_eq!(
        sample(&before, &format!("{p}version{{slot=\"current\"}}")),
        -1.0
    );
    assert_eq!(sample(&before, &format!("{p}ready")), 0.0);

    let stored = keys(50, 3);
    serve(&state, 7, &common::write_version(&dir.0, 7, &stored, 4));
    let mut batch = stored[..10].to_vec();
    batch.push(0); // absent
    for _ in 0..3 {
        let mut out = Vec::new();
        let mut scratch = binary::Scratch::default();
        let input = binary_request(&batch, None);
        binary::handle(&mut Cursor::new(input), &mut out, &state, &mut scratch).unwrap();
    }
    let body = format!("{{\"keys\": [{}, 0]}}", stored[0]);
    let raw = format!(
        "POST /DictService/seek HTTP/1.1\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    http::handle(
        &mut Cursor::new(raw.into_bytes()),
        &mut Vec::new(),
        &state,
        http::Port::Data,
    )
    .unwrap();
    let (_, text) = scrape(&state);
    assert_eq!(
        sample(&text, &format!("{p}seeks_total{{protocol=\"binary\"}}")),
        3.0
    );
    assert_eq!(
        sample(&text, &format!("{p}seeks_total{{protocol=\"http\"}}")),
        1.0
    );
    assert_eq!(sample(&text, &format!("{p}seek_keys_total")), 35.0);
    assert_eq!(sample(&text, &format!("{p}seek_missing_keys_total")), 4.0);
    let count = |proto: &str| {
        sample(
            &text,
            &format!("{p}seek_seconds_count{{protocol=\"{proto}\"}}"),
        )
    };
    assert_eq!((count("binary"), count("http")), (3.0, 1.0));
    let inf = format!("{p}seek_seconds_bucket{{le=\"+Inf\",protocol=\"binary\"}}");
    assert_eq!(sample(&text, &inf), 3.0);
    assert_eq!(
        sample(&text, &format!("{p}version{{slot=\"current\"}}")),
        7.0
    );
    assert_eq!(
        sample(&text, &format!("{p}version{{slot=\"background\"}}")),
        -1.0
    );
    assert_eq!(sample(&text, &format!("{p}keys{{slot=\"current\"}}")), 50.0);
    assert!(sample(&text, &format!("{p}mapped_bytes{{slot=\"current\"}}")) > 50.0 * 4.0 * 4.0);
    assert!(sample(&text, &format!("{p}resident_memory_bytes")) > 0.0);
    assert_eq!(sample(&text, &format!("{p}ready")), 1.0);
    assert_eq!(
        sample(&text, &format!("{p}loads_total{{result=\"loaded\"}}")),
        1.0
    );
}
