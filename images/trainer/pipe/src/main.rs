//! elasticctr-pipe: the pipe command of Paddle's dataset in native code, ElasticCTR lines on
//! stdin -> MultiSlot lines on stdout, a JSON report per input in `--report-dir`: the
//! contract of `python -m elasticctr_trainer.pipe` (its docstring), which it replaces where
//! it is installed (docs/trainer.md, "Data"). The trainer passes the slots it read from
//! slot.conf, so slot.conf has one reader.
//!
//!     elasticctr-pipe --slots 101,102,... --sparse-dim N --report-dir DIR < file

mod lines;

use std::fmt::Write as _;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::Path;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use lines::{is_blank, LineParser};

const FIRST_BAD_KEPT: usize = 5;
/// Leading bytes of compressed or archive formats (none can start a text line).
const COMPRESSED_MAGIC: [(&[u8], &str); 4] = [
    (b"\x1f\x8b", "gzip-compressed"),
    (b"\xfd7zXZ\x00", "xz-compressed"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed"),
    (b"PK\x03\x04", "a zip archive"),
];

struct Args {
    slots: Vec<u64>,
    sparse_dim: u64,
    report_dir: String,
}

/// Three flags, all required: no argument-parsing crate for that.
fn parse_args(argv: &[String]) -> Result<Args, String> {
    let (mut slots, mut sparse_dim, mut report_dir) = (None, None, None);
    let mut rest = argv.iter();
    while let Some(flag) = rest.next() {
        let value = rest.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--slots" => slots = Some(value),
            "--sparse-dim" => sparse_dim = Some(value),
            "--report-dir" => report_dir = Some(value),
            _ => return Err(format!("unknown argument {flag:?}")),
        }
    }
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
    Ok(Args {
        slots,
        sparse_dim,
        report_dir,
    })
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

/// Converts `input` to `out` line by line. A file that is not text stops the conversion
/// at its first sign (`failed`); an I/O error is returned.
fn convert(
    input: impl BufRead,
    parser: &mut LineParser,
    out: &mut impl Write,
) -> io::Result<Report> {
    let mut input = input;
    let mut report = Report::default();
    let (mut raw, mut converted) = (Vec::with_capacity(4096), Vec::with_capacity(4096));
    let mut number = 0u64;
    loop {
        raw.clear();
        if input.read_until(b'\n', &mut raw)? == 0 {
            break;
        }
        number += 1;
        if let Some(failed) = not_text(&raw, number) {
            report.failed = Some(failed);
            break;
        }
        let Ok(text) = std::str::from_utf8(&raw) else {
            report.failed = Some(format!("not UTF-8 text at line {number}"));
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

fn not_text(raw: &[u8], number: u64) -> Option<String> {
    if number == 1 {
        if let Some((_, what)) = COMPRESSED_MAGIC.iter().find(|(m, _)| raw.starts_with(m)) {
            return Some(format!("{what} data, not text"));
        }
    }
    raw.contains(&0)
        .then(|| format!("binary data (a NUL byte) at line {number}"))
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
    let mut parser = LineParser::new(&args.slots, args.sparse_dim);
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
        let mut parser = LineParser::new(&[101, 102, 103], 1000);
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
            (&b"\x1f\x8b\x08rest"[..], "gzip-compressed data, not text"),
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
        assert_eq!((args.slots, args.sparse_dim), (vec![1, 2], 9));
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
        ] {
            let err = parse_args(&argv(bad)).err().unwrap();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }
}
