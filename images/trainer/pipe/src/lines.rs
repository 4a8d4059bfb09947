//! Example lines, ElasticCTR's or PaddleRec's slot format with dense features, read by the
//! rules of `elasticctr_common/lines.py` and `elasticctr_trainer/lines.py`
//! (docs/architecture.md): the same lines are good, the same bad ones get the same reason
//! and detail, good ones the same MultiSlot line.
//! tests/images/trainer/test_trainer_native_pipe.py runs both on the same inputs.
//! Crossed ids are `elasticctr_common/crosses.py`'s rule (crossed_feasign below).

/// show and click reach Paddle as float32: above 2^24 they are no longer exact integers.
pub const MAX_SHOW: i128 = 1 << 24;
const MAX_FEASIGN: i128 = u64::MAX as i128;
/// What a number of more than 20 significant digits is read as (> any uint64).
const BEYOND: i128 = 100_000_000_000_000_000_000;
/// Sparse key of a slot with no feasign in an example.
const PADDING_KEY: u64 = 0;
/// The slot format's label token.
const LABEL: &str = "click";
/// A decimal at or above this in magnitude rounds to infinity as a float32 (2^128 - 2^103).
const F32_OVERFLOW: f64 = 340_282_356_779_733_661_637_539_395_458_142_568_448.0;
/// Of each slot of a cross, its first this many ids (feasigns whose key is not padding).
pub const MAX_CROSSED_IDS: usize = 4;
/// Crosses one pipe takes at most (crosses.py's MAX_CROSSES).
pub const MAX_CROSSES: usize = 64;

/// splitmix64's finaliser over uint64 (crosses.py's `splitmix64`): wrapping arithmetic.
pub const fn splitmix64(value: u64) -> u64 {
    let mut z = value.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// What distinguishes the cross of slots a and b from every other pair's.
pub const fn pair_seed(a: u64, b: u64) -> u64 {
    splitmix64(splitmix64(a) ^ b)
}

/// The crossed id of feasigns x (of the pair's first slot) and y (of its second).
pub const fn crossed_feasign(seed: u64, x: u64, y: u64) -> u64 {
    splitmix64(splitmix64(seed ^ x) ^ y)
}

/// A cross of the line being parsed: its two slots' indices in slot.conf and their seed.
struct Cross {
    a: usize,
    b: usize,
    seed: u64,
}

/// A slot's ids for its crosses in the line being parsed: the first MAX_CROSSED_IDS of
/// its feasigns whose key is not the padding key, in line order.
#[derive(Clone, Copy, Default)]
struct Side {
    ids: [u64; MAX_CROSSED_IDS],
    len: usize,
}

impl Side {
    fn ids(&self) -> &[u64] {
        &self.ids[..self.len]
    }
}

/// A line that is not an example: a short, countable reason and what it was about.
#[derive(Debug, PartialEq, Eq)]
pub struct BadLine {
    pub reason: &'static str,
    pub detail: String,
}

impl BadLine {
    fn new(reason: &'static str, detail: impl Into<String>) -> BadLine {
        BadLine {
            reason,
            detail: detail.into(),
        }
    }

    /// `reason: detail`, or the reason alone (Python's `str(BadLine)`).
    pub fn message(&self) -> String {
        if self.detail.is_empty() {
            self.reason.to_string()
        } else {
            format!("{}: {}", self.reason, self.detail)
        }
    }
}

/// The integer `text` spells in ASCII decimal digits with an optional `-`; None if it is
/// not one. More than 20 significant digits read as BEYOND.
fn parse_int(text: &str) -> Option<i128> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let significant = digits.trim_start_matches('0');
    let value = if significant.len() <= 19 {
        // u64 arithmetic while it cannot overflow (19 digits): the usual feasign
        i128::from(
            significant
                .bytes()
                .fold(0u64, |v, d| v * 10 + u64::from(d - b'0')),
        )
    } else if significant.len() == 20 {
        significant
            .bytes()
            .fold(0i128, |v, d| v * 10 + i128::from(d - b'0'))
    } else {
        BEYOND
    };
    Some(if negative { -value } else { value })
}

/// The first `n` characters of `text`.
fn prefix(text: &str, n: usize) -> &str {
    match text.char_indices().nth(n) {
        Some((end, _)) => &text[..end],
        None => text,
    }
}

/// Python's `repr()` of an ASCII string: the detail of a line with a control character.
fn py_repr(text: &str) -> String {
    let quote = if text.contains('\'') && !text.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(text.len() + 2);
    out.push(quote);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

fn is_control(b: u8) -> bool {
    matches!(b, 0x00..=0x08 | 0x0a..=0x1f | 0x7f)
}

/// A line with only spaces and tabs (or nothing): skipped, not counted.
pub fn is_blank(line: &str) -> bool {
    line.bytes().all(|b| b == b' ' || b == b'\t')
}

/// A dense feature of the slot format: `dim` values, each a token `<name>:<value>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dense {
    pub name: String,
    pub dim: usize,
}

/// Parses lines of one format for one slot.conf and sparse_dim into MultiSlot lines.
pub struct LineParser {
    /// Some: PaddleRec's slot format with these dense features; None: ElasticCTR lines.
    dense: Option<Vec<Dense>>,
    /// Per dense feature, the spans of its values in the line being parsed.
    dense_values: Vec<Vec<(usize, usize)>>,
    /// Slot id -> its index in slot.conf, by the id for small ids (the usual case: a
    /// hash per feasign was a fifth of the time), else sorted for a binary search.
    small_slots: Vec<Option<usize>>,
    large_slots: Vec<(i128, usize)>,
    sparse_dim: u64,
    /// Per slot, the keys of the line being parsed; the line's fields and features: kept
    /// from line to line to reuse their memory.
    keys: Vec<Vec<u64>>,
    fields: Vec<(usize, usize)>,
    features: Vec<(u64, i128, usize)>,
    /// The crosses, in the order given: one more sparse input each, after the slots'.
    crosses: Vec<Cross>,
    /// Per slot, its ids for the crosses (empty without crosses), and one cross's keys:
    /// kept from line to line as well.
    sides: Vec<Side>,
    crossed: Vec<u64>,
}

const SMALL_SLOT: u64 = 1 << 16;

impl LineParser {
    /// `dense`: Some for PaddleRec's slot format (with these dense features), None for
    /// ElasticCTR lines. `crosses`: pairs of slot ids, each two different slots of `slots`
    /// (the arguments' check).
    pub fn new(
        slots: &[u64],
        sparse_dim: u64,
        dense: Option<Vec<Dense>>,
        crosses: &[(u64, u64)],
    ) -> LineParser {
        let mut small_slots = vec![
            None;
            slots
                .iter()
                .filter(|&&s| s < SMALL_SLOT)
                .max()
                .map_or(0, |&m| m as usize + 1)
        ];
        let mut large_slots = Vec::new();
        for (index, &slot) in slots.iter().enumerate() {
            if slot < SMALL_SLOT {
                small_slots[slot as usize] = Some(index);
            } else {
                large_slots.push((i128::from(slot), index));
            }
        }
        large_slots.sort_unstable();
        let dense_count = dense.as_ref().map_or(0, Vec::len);
        let index = |slot: u64| {
            slots
                .iter()
                .position(|&s| s == slot)
                .expect("a cross of slots of slot.conf")
        };
        let crosses: Vec<Cross> = crosses
            .iter()
            .map(|&(a, b)| Cross {
                a: index(a),
                b: index(b),
                seed: pair_seed(a, b),
            })
            .collect();
        let sides = if crosses.is_empty() { 0 } else { slots.len() };
        LineParser {
            dense,
            dense_values: vec![Vec::new(); dense_count],
            small_slots,
            large_slots,
            sparse_dim,
            keys: vec![Vec::new(); slots.len()],
            fields: Vec::new(),
            features: Vec::new(),
            crosses,
            sides: vec![Side::default(); sides],
            crossed: Vec::with_capacity(MAX_CROSSED_IDS * MAX_CROSSED_IDS),
        }
    }

    fn slot_index(&self, slot: i128) -> Option<usize> {
        if (0..i128::from(SMALL_SLOT)).contains(&slot) {
            return self.small_slots.get(slot as usize).copied().flatten();
        }
        let found = self.large_slots.binary_search_by_key(&slot, |&(s, _)| s);
        found.ok().map(|at| self.large_slots[at].1)
    }

    /// Appends the MultiSlot line of `line` (without its line end) and `\n` to `out`:
    /// label, show, click, per slot in slot.conf order its keys (`feasign % sparse_dim`;
    /// the padding key for an empty slot), per cross its keys (crosses.py's
    /// `crossed_keys`; the padding key for none), then each dense feature's values as
    /// written.
    pub fn convert(&mut self, line: &str, out: &mut Vec<u8>) -> Result<(), BadLine> {
        let (show, click) = if self.dense.is_some() {
            self.split_slot_format(line)?
        } else {
            self.split(line)?
        };
        let label = if click > 0 { 1 } else { 0 };
        out.extend_from_slice(b"1 ");
        push_number(out, label);
        out.extend_from_slice(b" 1 ");
        push_number(out, show as u64);
        out.extend_from_slice(b" 1 ");
        push_number(out, click as u64);
        for keys in &self.keys {
            push_keys(out, keys);
        }
        for cross in &self.crosses {
            self.crossed.clear();
            let ys = self.sides[cross.b].ids();
            for &x in self.sides[cross.a].ids() {
                for &y in ys {
                    let key = crossed_feasign(cross.seed, x, y) % self.sparse_dim;
                    if key != PADDING_KEY {
                        self.crossed.push(key);
                    }
                }
            }
            push_keys(out, &self.crossed);
        }
        for spans in &self.dense_values {
            out.push(b' ');
            push_number(out, spans.len() as u64);
            for &(from, to) in spans {
                out.push(b' ');
                out.extend_from_slice(&line.as_bytes()[from..to]);
            }
        }
        out.push(b'\n');
        Ok(())
    }

    /// The line's fields (byte spans) into `self.fields`; BadLine for a character no line
    /// may hold.
    fn fields_of(&mut self, line: &str) -> Result<(), BadLine> {
        if !line.is_ascii() {
            return Err(BadLine::new("non-ASCII character", prefix(line, 80)));
        }
        if line.bytes().any(is_control) {
            return Err(BadLine::new("control character", py_repr(prefix(line, 80))));
        }
        self.fields.clear();
        let mut start = None;
        for (at, b) in line.bytes().enumerate() {
            match (b == b' ' || b == b'\t', start) {
                (true, Some(from)) => {
                    self.fields.push((from, at));
                    start = None;
                }
                (false, None) => start = Some(at),
                _ => {}
            }
        }
        if let Some(from) = start {
            self.fields.push((from, line.len()));
        }
        Ok(())
    }

    /// Each slot's keys from `self.features`; BadLine for a slot slot.conf does not have,
    /// named as the line's format writes it.
    fn keys_of(&mut self, line: &str) -> Result<(), BadLine> {
        for keys in &mut self.keys {
            keys.clear();
        }
        for side in &mut self.sides {
            side.len = 0;
        }
        let crossing = !self.sides.is_empty();
        let slot_format = self.dense.is_some();
        for &(feasign, slot, i) in &self.features {
            let Some(index) = self.slot_index(slot) else {
                let (from, to) = self.fields[i];
                let (first, second) = line[from..to].split_once(':').unwrap_or_default();
                let (feasign_text, slot_text) = if slot_format {
                    (second, first)
                } else {
                    (first, second)
                };
                let slot_shown = exact_slot(feasign_text, slot_text).unwrap_or(slot.to_string());
                let named = if slot_format {
                    format!("{slot_shown}:{feasign}")
                } else {
                    format!("{feasign}:{slot_shown}")
                };
                return Err(BadLine::new("unknown slot", named));
            };
            let key = feasign % self.sparse_dim;
            self.keys[index].push(key);
            if crossing && key != PADDING_KEY {
                let side = &mut self.sides[index];
                if side.len < MAX_CROSSED_IDS {
                    side.ids[side.len] = feasign;
                    side.len += 1;
                }
            }
        }
        Ok(())
    }

    /// A slot-format line: click (show 1), its keys into `self.keys`, its dense values'
    /// spans into `self.dense_values`; BadLine if it is not an example. Checks in Python's
    /// order: token by token, then the click, the dense features' counts, then the slots.
    fn split_slot_format(&mut self, line: &str) -> Result<(i128, i128), BadLine> {
        self.fields_of(line)?;
        let dense = self.dense.as_deref().unwrap_or_default();
        for spans in &mut self.dense_values {
            spans.clear();
        }
        self.features.clear();
        let mut click = None;
        for i in 0..self.fields.len() {
            let (from, to) = self.fields[i];
            let token = &line[from..to];
            let Some((name, value)) = token.split_once(':') else {
                return Err(BadLine::new("token without name", prefix(token, 80)));
            };
            if let Some(d) = dense.iter().position(|f| f.name == name) {
                if let Err(reason) = check_dense_value(value) {
                    return Err(BadLine::new(reason, prefix(token, 80)));
                }
                let start = from + name.len() + 1;
                self.dense_values[d].push((start, to));
            } else if name == LABEL {
                if click.is_some() {
                    return Err(BadLine::new("click given twice", prefix(line, 80)));
                }
                let Some(value) = parse_int(value) else {
                    return Err(BadLine::new("non-integer show/click", prefix(token, 80)));
                };
                if value != 0 && value != 1 {
                    return Err(BadLine::new(
                        "show/click out of range",
                        format!("click={value}"),
                    ));
                }
                click = Some(value);
            } else if (!name.is_empty() && name.bytes().all(|b| b.is_ascii_digit()))
                || name.starts_with('-')
            {
                let (Some(feasign), Some(slot)) = (parse_int(value), parse_int(name)) else {
                    return Err(BadLine::new(
                        "non-integer feasign or slot",
                        prefix(token, 80),
                    ));
                };
                if !(0..=MAX_FEASIGN).contains(&feasign) {
                    return Err(BadLine::new(
                        "feasign out of uint64 range",
                        prefix(token, 80),
                    ));
                }
                self.features.push((feasign as u64, slot, i));
            } else {
                return Err(BadLine::new("unknown feature name", prefix(token, 80)));
            }
        }
        let Some(click) = click else {
            return Err(BadLine::new("missing click", prefix(line, 80)));
        };
        for (feature, spans) in dense.iter().zip(&self.dense_values) {
            let got = spans.len();
            if got != feature.dim {
                let reason = if got == 0 {
                    "missing dense feature"
                } else if got < feature.dim {
                    "short dense feature"
                } else {
                    "long dense feature"
                };
                let detail = format!("{}: {got} of {} values", feature.name, feature.dim);
                return Err(BadLine::new(reason, detail));
            }
        }
        if self.features.is_empty() && dense.is_empty() {
            return Err(BadLine::new("no feasigns", ""));
        }
        self.keys_of(line)?;
        Ok((1, click))
    }

    /// show and click of `line`, its keys into `self.keys`; BadLine if it is not an
    /// example. The order of the checks is Python's: the whole line is read before any
    /// slot is looked up.
    fn split(&mut self, line: &str) -> Result<(i128, i128), BadLine> {
        self.fields_of(line)?;
        let field = |i: usize| &line[self.fields[i].0..self.fields[i].1];
        if self.fields.len() < 2 {
            return Err(BadLine::new("missing show/click", prefix(line, 80)));
        }
        let head = || format!("{} {}", field(0), field(1));
        let (show, click) = match (parse_int(field(0)), parse_int(field(1))) {
            (Some(show), Some(click)) => (show, click),
            _ => {
                let detail = head();
                return Err(BadLine::new(
                    "non-integer show/click",
                    prefix(&detail, 80).to_string(),
                ));
            }
        };
        if show == 0 {
            // The CTR accessor divides each update by the key's show count.
            return Err(BadLine::new("zero show", head()));
        }
        if show < 0 || click < 0 || click > show || show > MAX_SHOW {
            return Err(BadLine::new(
                "show/click out of range",
                format!("show={show} click={click}"),
            ));
        }
        if self.fields.len() == 2 {
            return Err(BadLine::new("no feasigns", ""));
        }
        self.features.clear();
        for i in 2..self.fields.len() {
            let token = field(i);
            let Some((feasign_text, slot_text)) = token.split_once(':') else {
                return Err(BadLine::new("feasign without slot", prefix(token, 80)));
            };
            let (Some(feasign), Some(slot)) = (parse_int(feasign_text), parse_int(slot_text))
            else {
                return Err(BadLine::new(
                    "non-integer feasign or slot",
                    prefix(token, 80),
                ));
            };
            if !(0..=MAX_FEASIGN).contains(&feasign) {
                return Err(BadLine::new(
                    "feasign out of uint64 range",
                    prefix(token, 80),
                ));
            }
            self.features.push((feasign as u64, slot, i));
        }
        self.keys_of(line)?;
        Ok((show, click))
    }
}

/// Why `text` is not a dense value Python's `dense_value` takes: a plain decimal
/// (`-?(digits[.digits]|.digits)[e[-+]digits]`) finite as a float32.
fn check_dense_value(text: &str) -> Result<(), &'static str> {
    let bytes = text.as_bytes();
    let mut at = usize::from(bytes.first() == Some(&b'-'));
    let digits = |from: usize| {
        bytes[from..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count()
    };
    let whole = digits(at);
    at += whole;
    let mut fraction = 0;
    if bytes.get(at) == Some(&b'.') {
        at += 1;
        fraction = digits(at);
        at += fraction;
    }
    if whole == 0 && fraction == 0 {
        return Err("non-numeric dense value");
    }
    if matches!(bytes.get(at), Some(b'e' | b'E')) {
        at += 1;
        if matches!(bytes.get(at), Some(b'-' | b'+')) {
            at += 1;
        }
        let exponent = digits(at);
        if exponent == 0 {
            return Err("non-numeric dense value");
        }
        at += exponent;
    }
    if at != bytes.len() {
        return Err("non-numeric dense value");
    }
    match text.parse::<f64>() {
        Ok(value) if value.abs() < F32_OVERFLOW => Ok(()),
        _ => Err("non-finite dense value"),
    }
}

/// Python reads `feasign:slot` of plain digits (feasign of at most 20) with `int()`, so an
/// unknown slot of more than 20 digits is named in full there, not as 10^20.
fn exact_slot(feasign_text: &str, slot_text: &str) -> Option<String> {
    let plain = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    let significant = slot_text.trim_start_matches('0');
    (plain(feasign_text) && plain(slot_text) && feasign_text.len() <= 20 && significant.len() > 20)
        .then(|| significant.to_string())
}

/// Appends ` <count> <key>...` of one sparse input: the padding key alone when `keys` is
/// empty.
fn push_keys(out: &mut Vec<u8>, keys: &[u64]) {
    out.push(b' ');
    if keys.is_empty() {
        out.extend_from_slice(b"1 0");
        debug_assert_eq!(PADDING_KEY, 0);
        return;
    }
    push_number(out, keys.len() as u64);
    for &key in keys {
        out.push(b' ');
        push_number(out, key);
    }
}

/// Appends `value` in decimal.
pub fn push_number(out: &mut Vec<u8>, mut value: u64) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[start..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn convert(line: &str) -> Result<String, BadLine> {
        let mut out = Vec::new();
        LineParser::new(&[101, 102, 103], 1000, None, &[]).convert(line, &mut out)?;
        Ok(String::from_utf8(out).unwrap())
    }

    /// The slot-format tests' dense features: `d` of 2 values, `age` of 1.
    fn test_dense() -> Vec<Dense> {
        vec![
            Dense {
                name: "d".into(),
                dim: 2,
            },
            Dense {
                name: "age".into(),
                dim: 1,
            },
        ]
    }

    fn convert_slot_format(line: &str) -> Result<String, BadLine> {
        let dense = test_dense();
        let mut out = Vec::new();
        LineParser::new(&[1, 2, 3], 1000, Some(dense), &[]).convert(line, &mut out)?;
        Ok(String::from_utf8(out).unwrap())
    }

    #[test]
    fn slot_format_lines_with_dense_features() {
        assert_eq!(
            convert_slot_format("click:1 d:0.5 age:30 d:-1e3 1:1005 3:7 1:8").unwrap(),
            "1 1 1 1 1 1 2 5 8 1 0 1 7 2 0.5 -1e3 1 30\n"
        );
        for (line, want) in [
            (
                "click:1 d:0.5 1:5 age:3",
                "short dense feature: d: 1 of 2 values",
            ),
            (
                "click:1 d:0.5 d:1 d:2 1:5 age:3",
                "long dense feature: d: 3 of 2 values",
            ),
            (
                "click:1 1:5 age:3",
                "missing dense feature: d: 0 of 2 values",
            ),
            ("click:1 d:x d:1 1:5 age:3", "non-numeric dense value: d:x"),
            (
                "click:1 d:nan d:1 1:5 age:3",
                "non-numeric dense value: d:nan",
            ),
            (
                "click:1 d:1e39 d:1 1:5 age:3",
                "non-finite dense value: d:1e39",
            ),
            ("click:1 d:1. d:.5 1:5 age:3e-2 9:5", "unknown slot: 9:5"),
            ("d:1 d:1 1:5 age:3", "missing click: d:1 d:1 1:5 age:3"),
            (
                "click:2 d:1 d:1 1:5 age:3",
                "show/click out of range: click=2",
            ),
            (
                "click:0 click:0 d:1 d:1 age:3",
                "click given twice: click:0 click:0 d:1 d:1 age:3",
            ),
            ("click:0 d:1 d:1 age:3 x:5", "unknown feature name: x:5"),
            ("click:0 d:1 d:1 age:3 5", "token without name: 5"),
            (
                "click:0 d:1 d:1 age:3 1:x",
                "non-integer feasign or slot: 1:x",
            ),
        ] {
            assert_eq!(
                convert_slot_format(line).unwrap_err().message(),
                want,
                "{line:?}"
            );
        }
        // dense features only: a line needs no feasign then
        assert_eq!(
            convert_slot_format("click:0 d:1 d:2 age:3").unwrap(),
            "1 0 1 1 1 0 1 0 1 0 1 0 2 1 2 1 3\n"
        );
        assert_eq!(check_dense_value("-.5e+7"), Ok(()));
        assert_eq!(check_dense_value("5."), Ok(()));
        assert_eq!(check_dense_value("-"), Err("non-numeric dense value"));
        assert_eq!(check_dense_value("1e"), Err("non-numeric dense value"));
        assert_eq!(check_dense_value("+1"), Err("non-numeric dense value"));
        assert_eq!(check_dense_value("3.4028235e38"), Ok(()));
        assert_eq!(
            check_dense_value("3.4028236e38"),
            Err("non-finite dense value")
        );
    }

    /// crosses.py's CROSS_VECTORS, (a, b, x, y, crossed feasign): the contract's fixed
    /// points, the same for the Python parsers and serving.
    const CROSS_VECTORS: [(u64, u64, u64, u64, u64); 6] = [
        (101, 102, 1, 2, 5749521250910205319),
        (101, 102, 2, 1, 15789894203959822817),
        (0, 0, 0, 0, 2391539541053276776),
        (u64::MAX, 5, u64::MAX, u64::MAX, 14880215314564804982),
        (7, 3, 123456789012345678, 987654321, 3475289505882875014),
        (26, 1, 18446744073709551557, 42, 13249862372824029802),
    ];

    #[test]
    fn crossed_feasigns_are_crosses_py_s() {
        for (a, b, x, y, want) in CROSS_VECTORS {
            assert_eq!(
                crossed_feasign(pair_seed(a, b), x, y),
                want,
                "{a} {b} {x} {y}"
            );
        }
    }

    fn convert_crossed(line: &str, sparse_dim: u64, crosses: &[(u64, u64)]) -> String {
        let mut parser = LineParser::new(&[101, 102, 103], sparse_dim, None, crosses);
        let mut out = Vec::new();
        parser.convert(line, &mut out).unwrap();
        // the parser's buffers carry nothing from one line to the next
        parser.convert(line, &mut out).unwrap();
        let out = String::from_utf8(out).unwrap();
        let (first, second) = out.split_at(out.len() / 2);
        assert_eq!(first, second);
        first.to_string()
    }

    /// Expected lines: what crosses.py's crossed_keys gives for them (the Python pipe's).
    #[test]
    fn crosses_follow_the_slots_with_their_crossed_keys() {
        let crosses = [(101, 102), (103, 101), (102, 101)];
        for (line, want) in [
            // single-hot: one key per cross; a cross's order of its slots matters
            (
                "1 0 5:101 7:102",
                "1 0 1 1 1 0 1 5 1 7 1 0 1 279 1 0 1 248\n",
            ),
            // more than 4 ids a side: each side's first 4 (after the padding ones)
            (
                "2 1 1000:101 11:101 12:101 13:101 14:101 15:101 16:101 \
                 21:102 22:102 23:102 24:102 25:102 2000:102",
                "1 1 1 2 1 1 7 0 11 12 13 14 15 16 6 21 22 23 24 25 0 1 0 \
                 16 239 46 61 949 765 443 298 600 252 961 114 487 522 911 634 393 1 0 \
                 16 562 379 920 393 796 176 285 794 650 38 636 712 332 984 429 201\n",
            ),
            // a repeated id crosses as often as it is given
            (
                "1 1 5:101 5:101 7:102 9:103",
                "1 1 1 1 1 1 2 5 5 1 7 1 9 2 279 279 2 998 998 2 248 248\n",
            ),
            // a side whose only feasign has the padding key: no crossed keys
            (
                "1 0 1000:101 7:102 8:102",
                "1 0 1 1 1 0 1 0 2 7 8 1 0 1 0 1 0 1 0\n",
            ),
            // a side with no feasign
            ("1 0 9:103", "1 0 1 1 1 0 1 0 1 0 1 9 1 0 1 0 1 0\n"),
            (
                "3 0 18446744073709551615:101 1:102",
                "1 0 1 3 1 0 1 615 1 1 1 0 1 114 1 0 1 388\n",
            ),
        ] {
            assert_eq!(convert_crossed(line, 1000, &crosses), want, "{line:?}");
        }
        // crossed keys that are the padding key are dropped (3 of the 9 here)
        let line = "1 0 1:101 3:101 5:101 7:101 1:102 3:102 5:102 7:102 9:102";
        assert_eq!(
            convert_crossed(line, 3, &[(101, 102)]),
            "1 0 1 1 1 0 4 1 0 2 1 5 1 0 2 1 0 1 0 6 2 2 2 1 2 1\n"
        );
        // no crosses: the line as ever
        assert_eq!(
            convert_crossed("1 0 5:101 7:102", 1000, &[]),
            "1 0 1 1 1 0 1 5 1 7 1 0\n"
        );
    }

    #[test]
    fn crosses_come_before_the_dense_features() {
        let dense = test_dense();
        let mut parser = LineParser::new(&[1, 2, 3], 1000, Some(dense), &[(1, 3), (3, 2)]);
        let mut out = Vec::new();
        let line = "click:1 d:0.5 age:30 d:-1e3 1:1005 3:7 1:8";
        parser.convert(line, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "1 1 1 1 1 1 2 5 8 1 0 1 7 2 951 403 1 0 2 0.5 -1e3 1 30\n"
        );
    }

    fn reason(line: &str) -> &'static str {
        convert(line).unwrap_err().reason
    }

    #[test]
    fn keys_map_into_sparse_dim_and_empty_slots_get_padding() {
        assert_eq!(
            convert("3 1 1005:101 7:101 18446744073709551615:103").unwrap(),
            "1 1 1 3 1 1 2 5 7 1 0 1 615\n"
        );
        assert_eq!(convert("2\t0  8:103").unwrap(), "1 0 1 2 1 0 1 0 1 0 1 8\n");
    }

    #[test]
    fn bad_lines_name_their_reason() {
        for (line, want) in [
            ("1", "missing show/click"),
            ("1 x 5:101", "non-integer show/click"),
            ("1 2 5:101", "show/click out of range"),
            ("-1 0 5:101", "show/click out of range"),
            ("16777217 0 5:101", "show/click out of range"),
            ("1 0", "no feasigns"),
            ("1 0 5-101", "feasign without slot"),
            ("1 0 abc:101", "non-integer feasign or slot"),
            ("1 0 :101", "non-integer feasign or slot"),
            (
                "1 0 18446744073709551616:101",
                "feasign out of uint64 range",
            ),
            ("1 0 -5:101", "feasign out of uint64 range"),
            ("1 0 5:999", "unknown slot"),
            ("0 1 7:101", "zero show"),
            ("-0 0 7:101", "zero show"),
            ("1 0 5:101\r7:102", "control character"),
            ("1 0 5:101 \u{667}:102", "non-ASCII character"),
            ("+1 0 5:101", "non-integer show/click"),
            ("1 0 5:1_01", "non-integer feasign or slot"),
            // the whole line is read before a slot is looked up
            ("1 0 5:999 x:101", "non-integer feasign or slot"),
        ] {
            assert_eq!(reason(line), want, "{line:?}");
        }
    }

    #[test]
    fn details_are_pythons() {
        let bad = convert("1 0 5:101\r'x\\").unwrap_err();
        assert_eq!(bad.message(), r#"control character: "1 0 5:101\r'x\\""#);
        let bad = convert("0 00000000000000000000000007 5:101").unwrap_err();
        assert_eq!(bad.message(), "zero show: 0 00000000000000000000000007");
        let bad = convert("3 999999999999999999999999 5:101").unwrap_err();
        assert_eq!(
            bad.message(),
            "show/click out of range: show=3 click=100000000000000000000"
        );
        let long_slot = format!("5:{}", "9".repeat(25));
        let bad = convert(&format!("1 0 {long_slot}")).unwrap_err();
        assert_eq!(bad.message(), format!("unknown slot: {long_slot}"));
        let bad = convert(&format!("1 0 05:-{}", "9".repeat(25))).unwrap_err();
        assert_eq!(bad.message(), "unknown slot: 5:-100000000000000000000");
        assert_eq!(convert("1 0").unwrap_err().message(), "no feasigns");
    }

    #[test]
    fn numbers() {
        assert_eq!(parse_int("007"), Some(7));
        assert_eq!(parse_int("-0"), Some(0));
        assert_eq!(parse_int("--5"), None);
        assert_eq!(parse_int("-"), None);
        assert_eq!(parse_int(&"1".repeat(21)), Some(BEYOND));
        let mut out = Vec::new();
        push_number(&mut out, u64::MAX);
        push_number(&mut out, 0);
        assert_eq!(out, b"184467440737095516150");
    }
}
