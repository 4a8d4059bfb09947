//! elasticctr-pipe: the pipe command of Paddle's dataset in native code, example lines on
//! stdin -> MultiSlot lines on stdout, a JSON report per input in `--report-dir`: the
//! contract of `python -m elasticctr_trainer.pipe` (its docstring), which it replaces where
//! it is installed (docs/trainer.md, "Data"). The trainer passes the slots it read from
//! slot.conf, so slot.conf has one reader. Input that is gzip, bzip2, xz or zstd data is
//! decompressed first (input.rs). Each `--cross A:B` (two slots of --slots) is one more
//! sparse input after the slots', its keys crossed ids (elasticctr_common/crosses.py).
//!
//!     elasticctr-pipe --slots 101,102,... --sparse-dim N --report-dir DIR \
//!         [--format elasticctr|paddlerec] [--dense NAME:DIM ...] [--cross A:B ...] < file

mod input;
mod lines;

use std::fmt::Write as _;
use std::io::{self, BufRead, BufReader, BufWriter, Cursor, Read, Write};
use std::path::Path;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use input::{Compression, Kind};
use lines::{is_blank, Dense, LineParser, MAX_CROSSES};

const FIRST_BAD_KEPT: usize = 5;

struct Args {
    slots: Vec<u64>,
    sparse_dim: u64,
    report_dir: String,
    /// Some: PaddleRec's slot format with these dense features; None: ElasticCTR lines.
    dense: Option<Vec<Dense>>,
    /// Pairs of slot ids, in the order given: each one more sparse input.
    crosses: Vec<(u64, u64)>,
}

/// Three flags required, the format's and crosses optional: no argument-parsing crate for
/// that.
fn parse_args(argv: &[String]) -> Result<Args, String> {
    let (mut slots, mut sparse_dim, mut report_dir) = (None, None, None);
    let (mut format, mut dense) = ("elasticctr", Vec::new());
    let mut crosses = Vec::new();
    let mut rest = argv.iter();
    while let Some(flag) = rest.next() {
        let value = rest.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--slots" => slots = Some(value),
            "--sparse-dim" => sparse_dim = Some(value),
            "--report-dir" => report_dir = Some(value),
            "--format" => format = value,
            "--dense" => {
                let (name, dim) = value
                    .rsplit_once(':')
                    .ok_or(format!("--dense: expected NAME:DIM, got {value:?}"))?;
                let dim = dim.parse().ok().filter(|&d| d >= 1).ok_or(format!(
                    "--dense: DIM must be a positive integer, got {value:?}"
                ))?;
                dense.push(Dense {
                    name: name.to_string(),
                    dim,
                });
            }
            "--cross" => crosses.push(value),
            _ => return Err(format!("unknown argument {flag:?}")),
        }
    }
    let dense = match format {
        "elasticctr" if dense.is_empty() => None,
        "elasticctr" => return Err("--dense needs --format paddlerec".into()),
        "paddlerec" => Some(dense),
        _ => return Err(format!("--format: elasticctr or paddlerec, got {format:?}")),
    };
    let slots: Vec<u64> = slots
        .ok_or("--slots is required")?
        .split(',')
        .map(|s| {
            s.parse()
                .map_err(|_| format!("--slots: not a slot id: {s:?}"))
        })
        .collect::<Result<_, _>>()?;
    let mut unique = slots.clone();
    unique.sort_unstable();
    unique.dedup();
    if unique.len() != slots.len() {
        return Err(format!("--slots: a slot id repeats: {slots:?}"));
    }
    let sparse_dim: u64 = sparse_dim
        .ok_or("--sparse-dim is required")?
        .parse()
        .map_err(|_| "--sparse-dim must be an integer".to_string())?;
    if sparse_dim < 2 {
        return Err(format!(
            "sparse_dim must be >= 2 (key 0 is padding), got {sparse_dim}"
        ));
    }
    let report_dir = report_dir.ok_or("--report-dir is required")?.clone();
    let crosses = parse_crosses(&crosses, &slots)?;
    Ok(Args {
        slots,
        sparse_dim,
        report_dir,
        dense,
        crosses,
    })
}

/// The `--cross A:B` values as pairs of slot ids: each two different slots of `slots`, no
/// pair twice (in either order), at most MAX_CROSSES (crosses.py's cross_problems).
fn parse_crosses(values: &[&String], slots: &[u64]) -> Result<Vec<(u64, u64)>, String> {
    if values.len() > MAX_CROSSES {
        return Err(format!(
            "--cross: at most {MAX_CROSSES} crosses, got {}",
            values.len()
        ));
    }
    // ASCII digits only (u64's parse would take a sign, Python's parse_int does not)
    let slot = |s: &str| {
        let digits = !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        digits.then(|| s.parse::<u64>().ok()).flatten()
    };
    let mut crosses: Vec<(u64, u64)> = Vec::with_capacity(values.len());
    for value in values {
        let (a, b) = value
            .split_once(':')
            .and_then(|(a, b)| Some((slot(a)?, slot(b)?)))
            .ok_or(format!(
                "--cross: expected A:B, two slot ids, got {value:?}"
            ))?;
        if a == b {
            return Err(format!("--cross: a slot crossed with itself: {value:?}"));
        }
        if let Some(missing) = [a, b].into_iter().find(|s| !slots.contains(s)) {
            return Err(format!(
                "--cross: slot {missing} is not in --slots: {value:?}"
            ));
        }
        if crosses.contains(&(a, b)) || crosses.contains(&(b, a)) {
            return Err(format!("--cross: this pair is given twice: {value:?}"));
        }
        crosses.push((a, b));
    }
    Ok(crosses)
}

#[derive(Default)]
struct Report {
    lines: u64,
    /// Counts by reason, in the order the reasons first came.
    reasons: Vec<(&'static str, u64)>,
    first_bad: Vec<(u64, String)>,
    failed: Option<String>,
}

impl Report {
    fn bad(&mut self, number: u64, reason: &'static str, message: impl FnOnce() -> String) {
        match self.reasons.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, count)) => *count += 1,
            None => self.reasons.push((reason, 1)),
        }
        if self.first_bad.len() < FIRST_BAD_KEPT {
            self.first_bad.push((number, message()));
        }
    }

    fn json(&self, path: &str) -> String {
        let bad: u64 = self.reasons.iter().map(|(_, n)| n).sum();
        let mut out = format!(
            "{{\"path\": {}, \"lines\": {}, \"bad\": {bad}, \"reasons\": {{",
            json_string(path),
            self.lines
        );
        for (i, (reason, count)) in self.reasons.iter().enumerate() {
            let comma = if i > 0 { ", " } else { "" };
            let _ = write!(out, "{comma}{}: {count}", json_string(reason));
        }
        out.push_str("}, \"first_bad\": [");
        for (i, (number, message)) in self.first_bad.iter().enumerate() {
            let comma = if i > 0 { ", " } else { "" };
            let _ = write!(out, "{comma}[{number}, {}]", json_string(message));
        }
        let failed = self.failed.as_deref().map_or("null".into(), json_string);
        let _ = write!(out, "], \"failed\": {failed}}}");
        out
    }
}

fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Converts the data file `input` to `out` line by line, decompressing it first if it is
/// compressed data. A file that is not text, or compressed data that breaks off or is
/// damaged, stops the conversion there (`failed`; the lines before it count); an I/O
/// error of the pipe itself is returned.
fn convert(
    mut input: impl BufRead,
    parser: &mut LineParser,
    out: &mut impl Write,
) -> io::Result<Report> {
    let head = input::read_head(&mut input)?;
    let kind = input::sniff(&head);
    let input = Cursor::new(head).chain(input);
    match kind {
        // Generic over the reader: plain text pays for no decoder's indirection.
        Kind::Text => convert_lines(input, None, parser, out),
        Kind::Compressed(compression) => {
            convert_lines(compression.decoder(input)?, Some(compression), parser, out)
        }
        Kind::Refused(what) => Ok(Report {
            failed: Some(format!("{what}: {}", input::NOT_READ)),
            ..Report::default()
        }),
    }
}

fn convert_lines(
    mut input: impl BufRead,
    compression: Option<Compression>,
    parser: &mut LineParser,
    out: &mut impl Write,
) -> io::Result<Report> {
    let mut report = Report::default();
    let (mut raw, mut converted) = (Vec::with_capacity(4096), Vec::with_capacity(4096));
    let mut number = 0u64;
    loop {
        raw.clear();
        match input.read_until(b'\n', &mut raw) {
            Ok(0) => break,
            Ok(_) => {}
            Err(err) => match compression {
                // A decoder's error: the data's, not the pipe's (the partial line is dropped).
                Some(compression) => {
                    eprintln!("elasticctr-pipe: {}: {err}", compression.name());
                    report.failed = Some(compression.broken(number));
                    break;
                }
                None => return Err(err),
            },
        }
        number += 1;
        if raw.contains(&0) {
            let failed = format!("binary data (a NUL byte) at line {number}");
            report.failed = Some(within(compression, failed));
            break;
        }
        let Ok(text) = std::str::from_utf8(&raw) else {
            let failed = format!("not UTF-8 text at line {number}");
            report.failed = Some(within(compression, failed));
            break;
        };
        let line = match text.strip_suffix('\n') {
            Some(line) => line.strip_suffix('\r').unwrap_or(line),
            None => text,
        };
        if is_blank(line) {
            continue;
        }
        report.lines += 1;
        match parser.convert(line, &mut converted) {
            Ok(()) => {
                if converted.len() >= 1 << 16 {
                    out.write_all(&converted)?;
                    converted.clear();
                }
            }
            Err(bad) => report.bad(number, bad.reason, || bad.message()),
        }
    }
    out.write_all(&converted)?;
    out.flush()?;
    Ok(report)
}

/// `failed`, said of the decompressed data when the file was compressed.
fn within(compression: Option<Compression>, failed: String) -> String {
    match compression {
        Some(compression) => format!("{}: {failed}", compression.name()),
        None => failed,
    }
}

/// The report file, written whole under a temporary name, then renamed.
fn write_report(dir: &str, json: &str) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let name = format!("{nanos:032x}{:08x}", std::process::id());
    let tmp = Path::new(dir).join(format!(".{name}.tmp"));
    std::fs::write(&tmp, json)?;
    std::fs::rename(&tmp, Path::new(dir).join(format!("{name}.json")))
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let args = match parse_args(&argv) {
        Ok(args) => args,
        Err(err) => {
            eprintln!("elasticctr-pipe: {err}");
            return ExitCode::from(2);
        }
    };
    // Paddle runs the pipe as `(cmd) < "<file>"`: stdin is the file and names it.
    let path = std::fs::read_link("/proc/self/fd/0")
        .map_or("<stdin>".into(), |p| p.to_string_lossy().into_owned());
    let mut parser = LineParser::new(&args.slots, args.sparse_dim, args.dense, &args.crosses);
    let stdin = io::stdin().lock();
    let mut stdout = BufWriter::with_capacity(1 << 20, io::stdout().lock());
    let result = convert(
        BufReader::with_capacity(1 << 20, stdin),
        &mut parser,
        &mut stdout,
    );
    let (report, code) = match result {
        Ok(report) => (report, ExitCode::SUCCESS),
        Err(err) => {
            eprintln!("elasticctr-pipe: {err}");
            let failed = format!("the pipe command failed: {err}");
            let report = Report {
                failed: Some(failed),
                ..Report::default()
            };
            (report, ExitCode::FAILURE)
        }
    };
    if let Err(err) = write_report(&args.report_dir, &report.json(&path)) {
        eprintln!(
            "elasticctr-pipe: cannot write the report into {}: {err}",
            args.report_dir
        );
        return ExitCode::FAILURE;
    }
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(input: &[u8]) -> (String, Report) {
        let mut parser = LineParser::new(&[101, 102, 103], 1000, None, &[]);
        let mut out = Vec::new();
        let report = convert(input, &mut parser, &mut out).unwrap();
        (String::from_utf8(out).unwrap(), report)
    }

    #[test]
    fn bad_lines_are_counted_and_skipped() {
        let (out, report) = run(b"1 0 5:101\n1 x 5:101\n\n \t\n1 1 6:102\r\n1 0 5:999");
        assert_eq!(out, "1 0 1 1 1 0 1 5 1 0 1 0\n1 1 1 1 1 1 1 0 1 6 1 0\n");
        assert_eq!(report.lines, 4);
        assert_eq!(
            report.reasons,
            vec![("non-integer show/click", 1), ("unknown slot", 1)]
        );
        assert_eq!(report.first_bad[1], (6, "unknown slot: 5:999".to_string()));
        assert!(report.failed.is_none());
    }

    #[test]
    fn a_file_that_is_not_text_fails() {
        for (input, failed) in [
            (
                &b"PK\x03\x04rest"[..],
                "a zip archive: neither text nor gzip, bzip2, xz or zstd data",
            ),
            (b"1 0 5:101\n1 0 \xff:101\n", "not UTF-8 text at line 2"),
            (
                b"1 0 5:101\n1 0 5\x00:101\n",
                "binary data (a NUL byte) at line 2",
            ),
        ] {
            let (out, report) = run(input);
            assert_eq!(report.failed.as_deref(), Some(failed));
            assert!(out.matches('\n').count() <= 1);
        }
    }

    fn compressed(compression: Compression, data: &[u8]) -> Vec<u8> {
        match compression {
            Compression::Gzip => {
                let mut encoder =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                encoder.write_all(data).unwrap();
                encoder.finish().unwrap()
            }
            Compression::Bzip2 => {
                let mut encoder =
                    bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::fast());
                encoder.write_all(data).unwrap();
                encoder.finish().unwrap()
            }
            Compression::Xz => {
                let mut encoder = liblzma::write::XzEncoder::new(Vec::new(), 1);
                encoder.write_all(data).unwrap();
                encoder.finish().unwrap()
            }
            Compression::Zstd => zstd::encode_all(data, 1).unwrap(),
        }
    }

    #[test]
    fn compressed_files_are_read_as_their_text() {
        let text = b"1 0 5:101\n1 x 5:101\n1 1 6:102\n";
        let (plain, plain_report) = run(text);
        for compression in [
            Compression::Gzip,
            Compression::Bzip2,
            Compression::Xz,
            Compression::Zstd,
        ] {
            let data = [compressed(compression, text), compressed(compression, text)].concat();
            let (out, report) = run(&data);
            assert_eq!(out, plain.repeat(2), "{compression:?}");
            assert_eq!((report.lines, report.failed), (6, None), "{compression:?}");
            assert_eq!(report.first_bad[1].0, 5);
            assert_eq!(plain_report.lines, 3);
        }
    }

    #[test]
    fn truncated_compressed_data_fails_after_the_lines_it_held() {
        let text = "1 0 5:101\n".repeat(20_000);
        for compression in [
            Compression::Gzip,
            Compression::Bzip2,
            Compression::Xz,
            Compression::Zstd,
        ] {
            let data = compressed(compression, text.as_bytes());
            let (out, report) = run(&data[..data.len() - 12]);
            let failed = report.failed.unwrap();
            let prefix = format!("{}: truncated or corrupt data ", compression.name());
            assert!(failed.starts_with(&prefix), "{failed}");
            assert_eq!(out.matches('\n').count() as u64, report.lines);
        }
        let (out, report) = run(&compressed(Compression::Gzip, b"1 0 5:101\n\x00\n"));
        assert_eq!(out.matches('\n').count(), 1);
        assert_eq!(
            report.failed.as_deref(),
            Some("gzip: binary data (a NUL byte) at line 2")
        );
    }

    #[test]
    fn the_report_is_json() {
        let (_, report) = run(b"1 0 5:101\r\"\\\n");
        assert_eq!(
            report.json("/d/\"f\""),
            "{\"path\": \"/d/\\\"f\\\"\", \"lines\": 1, \"bad\": 1, \"reasons\": \
             {\"control character\": 1}, \"first_bad\": [[1, \"control character: \
             '1 0 5:101\\\\r\\\"\\\\\\\\'\"]], \"failed\": null}"
        );
    }

    #[test]
    fn arguments_are_checked() {
        let argv = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        let args = parse_args(&argv("--slots 1,2 --sparse-dim 9 --report-dir /r")).unwrap();
        assert_eq!(
            (args.slots, args.sparse_dim, args.dense, args.crosses),
            (vec![1, 2], 9, None, vec![])
        );
        let slot_format = "--slots 1 --sparse-dim 9 --report-dir r --format paddlerec \
                           --dense dense_feature:13";
        let args = parse_args(&argv(slot_format)).unwrap();
        let dense = args.dense.unwrap();
        assert_eq!(
            (dense[0].name.as_str(), dense[0].dim),
            ("dense_feature", 13)
        );
        for (bad, says) in [
            ("--slots 1,1 --sparse-dim 9 --report-dir r", "repeats"),
            ("--slots 1,x --sparse-dim 9 --report-dir r", "not a slot id"),
            (
                "--slots 1 --sparse-dim 1 --report-dir r",
                "sparse_dim must be >= 2",
            ),
            ("--slots 1 --sparse-dim 9", "--report-dir is required"),
            (
                "--slots 1 --sparse-dim 9 --report-dir r --x 1",
                "unknown argument",
            ),
            (
                "--slots 1 --sparse-dim 9 --report-dir r --dense d:2",
                "--dense needs --format paddlerec",
            ),
            (
                "--slots 1 --sparse-dim 9 --report-dir r --format x",
                "--format",
            ),
            (
                "--slots 1 --sparse-dim 9 --report-dir r --format paddlerec --dense d:0",
                "DIM must be a positive integer",
            ),
        ] {
            let err = parse_args(&argv(bad)).err().unwrap();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    #[test]
    fn crosses_are_checked() {
        let argv = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        let base = "--slots 1,2,3,18446744073709551615 --sparse-dim 9 --report-dir r";
        let args = parse_args(&argv(&format!(
            "--cross 2:1 {base} --cross 3:18446744073709551615 --cross 01:3"
        )))
        .unwrap();
        assert_eq!(args.crosses, vec![(2, 1), (3, u64::MAX), (1, 3)]);
        let slot_format = format!("{base} --format paddlerec --dense d:2 --cross 1:2");
        assert_eq!(
            parse_args(&argv(&slot_format)).unwrap().crosses,
            vec![(1, 2)]
        );
        for (crosses, says) in [
            (
                "--cross 1",
                "--cross: expected A:B, two slot ids, got \"1\"",
            ),
            (
                "--cross 1:x",
                "--cross: expected A:B, two slot ids, got \"1:x\"",
            ),
            (
                "--cross 1:2:3",
                "--cross: expected A:B, two slot ids, got \"1:2:3\"",
            ),
            (
                "--cross :2",
                "--cross: expected A:B, two slot ids, got \":2\"",
            ),
            (
                "--cross -1:2",
                "--cross: expected A:B, two slot ids, got \"-1:2\"",
            ),
            (
                "--cross 1:+2",
                "--cross: expected A:B, two slot ids, got \"1:+2\"",
            ),
            (
                "--cross 2:2",
                "--cross: a slot crossed with itself: \"2:2\"",
            ),
            ("--cross 1:4", "--cross: slot 4 is not in --slots: \"1:4\""),
            ("--cross 5:1", "--cross: slot 5 is not in --slots: \"5:1\""),
            (
                "--cross 1:2 --cross 1:2",
                "--cross: this pair is given twice: \"1:2\"",
            ),
            (
                "--cross 1:2 --cross 3:1 --cross 2:1",
                "--cross: this pair is given twice: \"2:1\"",
            ),
            ("--cross", "--cross needs a value"),
        ] {
            let bad = format!("{base} {crosses}");
            let err = parse_args(&argv(&bad)).err().unwrap();
            assert_eq!(err, says, "{bad}");
        }
        let slots: Vec<String> = (1..=12).map(|s| s.to_string()).collect();
        let pairs: Vec<String> = (1..=12u64)
            .flat_map(|a| (a + 1..=12).map(move |b| format!("--cross {a}:{b}")))
            .collect();
        let many = |n: usize| {
            let slots = slots.join(",");
            let pairs = pairs[..n].join(" ");
            format!("--slots {slots} --sparse-dim 9 --report-dir r {pairs}")
        };
        assert_eq!(parse_args(&argv(&many(64))).unwrap().crosses.len(), 64);
        assert_eq!(
            parse_args(&argv(&many(65))).err().unwrap(),
            "--cross: at most 64 crosses, got 65"
        );
    }

    #[test]
    fn crossed_lines_are_converted() {
        let mut parser = LineParser::new(&[101, 102, 103], 1000, None, &[(101, 102)]);
        let mut out = Vec::new();
        let report = convert(
            &b"1 0 5:101 7:102
1 0 5:999
1 1 9:103
"[..],
            &mut parser,
            &mut out,
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "1 0 1 1 1 0 1 5 1 7 1 0 1 279\n1 1 1 1 1 1 1 0 1 0 1 9 1 0\n"
        );
        assert_eq!(
            (report.lines, report.reasons),
            (3, vec![("unknown slot", 1)])
        );
    }
}
