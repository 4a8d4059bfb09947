//! The request-body parser of elasticctr serving (docs/serving.md, "Parsing").
//!
//! It reads the JSON subset that well-formed prediction requests use, in one pass, and
//! writes each feasign with the index of its slot and instance into the caller's arrays:
//!
//! - ElasticCTR's form: `{"instances": [{"slots": [{"slot_name": "101", "feasigns":
//!   [1, 2]}, ...]}, ...]}` (the two members of a slot in either order);
//! - the plain form: `{"instances": [{"101": [1, 2], ...}, ...]}`.
//!
//! Feasigns are JSON integers in [0, 2^64). Anything else, valid JSON or not (another
//! member, a string escape, a feasign given as a string or a float, an unknown slot, a
//! slot named twice in a plain instance, an empty instance, too many instances), makes it
//! return `BAIL` without further work: the caller then parses the body with its Python
//! code, which either gives the same answer or names the problem. So for every body
//! this parser accepts, its output is exactly what the Python parser produces, and
//! every body it does not accept is left to the Python parser. Feasigns are written in
//! the order the Python parser lists them: instance by instance, slot entry by slot
//! entry, each list in order.
//!
//! The code does not panic (no unchecked indexing, no arithmetic that can overflow), so
//! no body can abort the process; `panic = "abort"` makes any bug a crash, not undefined
//! behaviour across the C ABI.

use std::slice;

/// The body is outside the subset: parse it with the Python code.
pub const BAIL: i64 = -1;
/// The arguments are unusable (null pointers, names not valid).
pub const BAD_ARGS: i64 = -2;

/// The model's slot names (decimal strings of their ids), looked up by their bytes.
struct Names<'a> {
    /// Names of up to 7 bytes packed with their length into one u64, sorted, with index.
    packed: Vec<(u64, i32)>,
    /// The packed form of each slot (u64::MAX for a longer name), by slot index.
    by_index: Vec<u64>,
    /// Names of 8 bytes or more, with index (compared byte by byte).
    long: Vec<(&'a [u8], i32)>,
}

fn pack(name: &[u8]) -> Option<u64> {
    if name.len() > 7 {
        return None;
    }
    let mut key = (name.len() as u64) << 56;
    for (i, &byte) in name.iter().enumerate() {
        key |= u64::from(byte) << (8 * i);
    }
    Some(key)
}

impl<'a> Names<'a> {
    fn new(joined: &'a [u8]) -> Option<Names<'a>> {
        let mut names = Names {
            packed: Vec::new(),
            by_index: Vec::new(),
            long: Vec::new(),
        };
        if joined.is_empty() {
            return Some(names);
        }
        for (index, name) in joined.split(|&b| b == b'\n').enumerate() {
            let index = i32::try_from(index).ok()?;
            match pack(name) {
                Some(key) => {
                    names.packed.push((key, index));
                    names.by_index.push(key);
                }
                None => {
                    names.long.push((name, index));
                    names.by_index.push(u64::MAX);
                }
            }
        }
        names.packed.sort_unstable();
        Some(names)
    }

    /// The index of slot `name`; `hint` is the index expected (the previous slot's + 1).
    #[inline]
    fn find(&self, name: &[u8], hint: usize) -> Option<i32> {
        match pack(name) {
            Some(key) => {
                if self.by_index.get(hint) == Some(&key) {
                    return i32::try_from(hint).ok();
                }
                let at = self.packed.binary_search_by_key(&key, |&(k, _)| k).ok()?;
                self.packed.get(at).map(|&(_, index)| index)
            }
            None => self
                .long
                .iter()
                .find(|(n, _)| *n == name)
                .map(|&(_, index)| index),
        }
    }
}

/// Where the feasigns go: three arrays of `cap` entries each.
struct Out<'o> {
    raw: &'o mut [u64],
    slots: &'o mut [i32],
    rows: &'o mut [i32],
    len: usize,
}

impl Out<'_> {
    #[inline]
    fn push(&mut self, value: u64) -> Option<()> {
        *self.raw.get_mut(self.len)? = value;
        self.len += 1;
        Some(())
    }

    /// Slot and instance of the feasigns written since `start`.
    #[inline]
    fn label(&mut self, start: usize, slot: i32, row: i32) -> Option<()> {
        self.slots.get_mut(start..self.len)?.fill(slot);
        self.rows.get_mut(start..self.len)?.fill(row);
        Some(())
    }
}

struct Parser<'b> {
    body: &'b [u8],
    at: usize,
}

impl<'b> Parser<'b> {
    #[inline]
    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.body.get(self.at) {
            self.at += 1;
        }
    }

    /// The next byte after whitespace, not consumed.
    #[inline]
    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.body.get(self.at).copied()
    }

    /// Consume `byte` (after whitespace), or fail.
    #[inline]
    fn eat(&mut self, byte: u8) -> Option<()> {
        if self.peek()? == byte {
            self.at += 1;
            Some(())
        } else {
            None
        }
    }

    /// `,` (then true) or `close` (then false), after whitespace.
    #[inline]
    fn next_or_close(&mut self, close: u8) -> Option<bool> {
        let byte = self.peek()?;
        self.at += 1;
        if byte == b',' {
            Some(true)
        } else if byte == close {
            Some(false)
        } else {
            None
        }
    }

    /// A string without escapes: its raw bytes. A string with a backslash fails (the
    /// caller compares the bytes with ASCII names, so no other check is needed: control
    /// characters or invalid UTF-8 cannot be equal to one).
    #[inline]
    fn string(&mut self) -> Option<&'b [u8]> {
        self.eat(b'"')?;
        let rest = self.body.get(self.at..)?;
        let len = rest.iter().position(|&b| b == b'"' || b == b'\\')?;
        if rest.get(len) != Some(&b'"') {
            return None;
        }
        self.at += len + 1;
        rest.get(..len)
    }

    /// A member name and its colon.
    #[inline]
    fn key(&mut self) -> Option<&'b [u8]> {
        let key = self.string()?;
        self.eat(b':')?;
        Some(key)
    }

    /// Consume `literal` (a quoted member name) if the body continues with it.
    #[inline]
    fn literal(&mut self, literal: &[u8]) -> bool {
        self.skip_ws();
        let found = self
            .body
            .get(self.at..)
            .is_some_and(|rest| rest.starts_with(literal));
        if found {
            self.at += literal.len();
        }
        found
    }

    /// A JSON integer in [0, 2^64): `0` or a digit 1-9 then digits, as JSON writes them.
    /// A sign, fraction or exponent leaves bytes the caller's grammar does not accept.
    #[inline]
    fn uint(&mut self) -> Option<u64> {
        self.skip_ws();
        let first = *self.body.get(self.at)?;
        if !first.is_ascii_digit() {
            return None;
        }
        self.at += 1;
        let mut value = u64::from(first - b'0');
        if first == b'0' {
            return Some(value); // "01" leaves "1", which no rule accepts next
        }
        // 19 digits always fit in a u64; a 20th is checked, a 21st overflows.
        let mut digits = 1;
        while let Some(&byte) = self.body.get(self.at) {
            if !byte.is_ascii_digit() {
                break;
            }
            digits += 1;
            let digit = u64::from(byte - b'0');
            value = if digits < 20 {
                value * 10 + digit
            } else {
                value.checked_mul(10)?.checked_add(digit)?
            };
            self.at += 1;
        }
        Some(value)
    }

    /// `[f, ...]` into `out`; the number of feasigns.
    fn feasigns(&mut self, out: &mut Out) -> Option<usize> {
        self.eat(b'[')?;
        if self.peek()? == b']' {
            self.at += 1;
            return Some(0);
        }
        let mut count = 0usize;
        loop {
            out.push(self.uint()?)?;
            count += 1;
            if !self.next_or_close(b']')? {
                return Some(count);
            }
        }
    }

    /// `{"slot_name": "101", "feasigns": [...]}`, members in either order.
    fn slot_entry(
        &mut self,
        names: &Names,
        hint: &mut usize,
        row: i32,
        out: &mut Out,
    ) -> Option<usize> {
        self.eat(b'{')?;
        let start = out.len;
        let mut slot: Option<i32> = None;
        let mut count: Option<usize> = None;
        for member in 0..2 {
            if member == 1 {
                self.eat(b',')?;
            }
            // The usual spelling first, then any member name (then bail unless it is one).
            let key: &[u8] = if self.literal(b"\"slot_name\"") {
                b"slot_name"
            } else if self.literal(b"\"feasigns\"") {
                b"feasigns"
            } else {
                self.string()?
            };
            self.eat(b':')?;
            match key {
                b"slot_name" if slot.is_none() => {
                    let index = names.find(self.string()?, *hint)?;
                    *hint = usize::try_from(index).ok()?.checked_add(1)?;
                    slot = Some(index);
                }
                b"feasigns" if count.is_none() => count = Some(self.feasigns(out)?),
                _ => return None,
            }
        }
        self.eat(b'}')?;
        out.label(start, slot?, row)?;
        count
    }

    /// `{"slots": [entry, ...]}`: the number of feasigns.
    fn elasticctr_instance(&mut self, names: &Names, row: i32, out: &mut Out) -> Option<usize> {
        self.eat(b'{')?;
        if self.key()? != b"slots" {
            return None;
        }
        self.eat(b'[')?;
        let mut count = 0usize;
        let mut hint = 0usize;
        if self.peek()? == b']' {
            self.at += 1;
        } else {
            loop {
                count = count.checked_add(self.slot_entry(names, &mut hint, row, out)?)?;
                if !self.next_or_close(b']')? {
                    break;
                }
            }
        }
        self.eat(b'}')?;
        Some(count)
    }

    /// `{"101": [...], ...}` with every slot at most once: the number of feasigns.
    fn plain_instance(
        &mut self,
        names: &Names,
        seen: &mut [i32],
        row: i32,
        out: &mut Out,
    ) -> Option<usize> {
        self.eat(b'{')?;
        let mut count = 0usize;
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(0);
        }
        let mut hint = 0usize;
        loop {
            let index = names.find(self.string()?, hint)?;
            let position = usize::try_from(index).ok()?;
            hint = position.checked_add(1)?;
            let mark = seen.get_mut(position)?;
            if *mark == row {
                return None; // a slot named twice: the last one would win in Python
            }
            *mark = row;
            self.eat(b':')?;
            let start = out.len;
            count = count.checked_add(self.feasigns(out)?)?;
            out.label(start, index, row)?;
            if !self.next_or_close(b'}')? {
                return Some(count);
            }
        }
    }

    /// The whole body: the number of instances.
    fn request(
        &mut self,
        names: &Names,
        plain: bool,
        max_instances: i64,
        out: &mut Out,
    ) -> Option<i64> {
        self.eat(b'{')?;
        if self.key()? != b"instances" {
            return None;
        }
        self.eat(b'[')?;
        let mut seen = vec![-1i32; names.by_index.len()];
        let mut rows: i64 = 0;
        loop {
            if rows >= max_instances {
                return None; // over the limit: the Python code answers 413
            }
            let row = i32::try_from(rows).ok()?;
            let count = if plain {
                self.plain_instance(names, &mut seen, row, out)?
            } else {
                self.elasticctr_instance(names, row, out)?
            };
            if count == 0 {
                return None; // an empty instance: the Python code names it
            }
            rows += 1;
            if !self.next_or_close(b']')? {
                break;
            }
        }
        self.eat(b'}')?;
        self.skip_ws();
        if self.at != self.body.len() {
            return None;
        }
        Some(rows)
    }
}

/// Parse one request body.
///
/// `names`: the model's slot names in input order, joined by `\n`. `plain`: 0 for
/// ElasticCTR's form, 1 for the plain form. `raw`, `slots`, `rows`: arrays of `cap`
/// entries for the feasigns, their slot index and their instance index (`len(body) / 2
/// + 1` entries are always enough). On success returns the number of feasigns written and
/// stores the number of instances in `*count`; returns `BAIL` (-1) when the body is not in
/// the subset and `BAD_ARGS` (-2) for unusable arguments.
///
/// # Safety
/// `body` and `names` must point to `body_len` and `names_len` readable bytes, `raw`,
/// `slots` and `rows` to `cap` writable entries each, `count` to a writable i64; the
/// arrays must not overlap. Pointers may be null only when the length is 0.
#[no_mangle]
pub unsafe extern "C" fn elasticctr_parse(
    body: *const u8,
    body_len: usize,
    names: *const u8,
    names_len: usize,
    plain: i32,
    max_instances: i64,
    raw: *mut u64,
    slots: *mut i32,
    rows: *mut i32,
    cap: usize,
    count: *mut i64,
) -> i64 {
    if count.is_null()
        || (body.is_null() && body_len > 0)
        || (names.is_null() && names_len > 0)
        || (cap > 0 && (raw.is_null() || slots.is_null() || rows.is_null()))
    {
        return BAD_ARGS;
    }
    let body = if body_len == 0 {
        &[][..]
    } else {
        slice::from_raw_parts(body, body_len)
    };
    let names = if names_len == 0 {
        &[][..]
    } else {
        slice::from_raw_parts(names, names_len)
    };
    let mut out = if cap == 0 {
        Out {
            raw: &mut [],
            slots: &mut [],
            rows: &mut [],
            len: 0,
        }
    } else {
        Out {
            raw: slice::from_raw_parts_mut(raw, cap),
            slots: slice::from_raw_parts_mut(slots, cap),
            rows: slice::from_raw_parts_mut(rows, cap),
            len: 0,
        }
    };
    let Some(names) = Names::new(names) else {
        return BAD_ARGS;
    };
    let mut parser = Parser { body, at: 0 };
    match parser.request(&names, plain != 0, max_instances, &mut out) {
        Some(instances) => match i64::try_from(out.len) {
            Ok(len) => {
                *count = instances;
                len
            }
            Err(_) => BAIL,
        },
        None => BAIL,
    }
}

/// splitmix64's finalizer: spreads sequential keys over the table.
#[inline]
fn mix64(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The distinct keys of `keys[..n]` in order of first appearance, into `unique`, and
/// each key's position among them, into `inverse` (so `unique[inverse[i]] == keys[i]`).
/// Returns the number of distinct keys, or `BAD_ARGS`.
///
/// # Safety
/// `keys` must point to `n` readable u64, `unique` and `inverse` to `n` writable entries
/// each (null only when `n` is 0).
#[no_mangle]
pub unsafe extern "C" fn elasticctr_unique(
    keys: *const u64,
    n: usize,
    unique: *mut u64,
    inverse: *mut i64,
) -> i64 {
    if n == 0 {
        return 0;
    }
    if keys.is_null() || unique.is_null() || inverse.is_null() {
        return BAD_ARGS;
    }
    let keys = slice::from_raw_parts(keys, n);
    let unique = slice::from_raw_parts_mut(unique, n);
    let inverse = slice::from_raw_parts_mut(inverse, n);
    match unique_into(keys, unique, inverse) {
        Some(count) => i64::try_from(count).unwrap_or(BAD_ARGS),
        None => BAD_ARGS,
    }
}

fn unique_into(keys: &[u64], unique: &mut [u64], inverse: &mut [i64]) -> Option<usize> {
    // Open addressing, at most half full; each slot holds 1 + the key's position.
    let size = keys
        .len()
        .checked_mul(2)?
        .checked_next_power_of_two()?
        .max(16);
    let mask = size - 1;
    let mut table = vec![0u32; size];
    let mut count = 0usize;
    for (i, &key) in keys.iter().enumerate() {
        let mut at = (mix64(key) as usize) & mask;
        let position = loop {
            let entry = *table.get(at)?;
            if entry == 0 {
                *unique.get_mut(count)? = key;
                count += 1;
                *table.get_mut(at)? = u32::try_from(count).ok()?;
                break count - 1;
            }
            let position = usize::try_from(entry - 1).ok()?;
            if *unique.get(position)? == key {
                break position;
            }
            at = (at + 1) & mask;
        };
        *inverse.get_mut(i)? = i64::try_from(position).ok()?;
    }
    Some(count)
}

/// Sum-pooling: `out[s, r, :]` = the sum of `values[inverse[k], :]` over every k with
/// `slots[k] == s` and `rows[k] == r`, added in k order in f64 and rounded to f32 once,
/// as numpy's `bincount` with float64 weights does (so the result is identical to
/// `batcher.pool`, bit for bit). `out` is [slot_count, count, dim], C order. Returns 0,
/// or `BAD_ARGS` (an index out of range, sizes that do not fit).
///
/// # Safety
/// `values` must point to `nvalues * dim` readable f32, `inverse`, `slots` and `rows` to
/// `n` readable entries each, `out` to `slot_count * count * dim` writable f32.
#[no_mangle]
pub unsafe extern "C" fn elasticctr_pool(
    values: *const f32,
    nvalues: usize,
    dim: usize,
    inverse: *const i64,
    slots: *const i32,
    rows: *const i32,
    n: usize,
    slot_count: usize,
    count: usize,
    out: *mut f32,
) -> i64 {
    let Some(cells) = slot_count.checked_mul(count) else {
        return BAD_ARGS;
    };
    let (Some(out_len), Some(values_len)) = (cells.checked_mul(dim), nvalues.checked_mul(dim))
    else {
        return BAD_ARGS;
    };
    if (out.is_null() && out_len > 0)
        || (values.is_null() && values_len > 0)
        || (n > 0 && (inverse.is_null() || slots.is_null() || rows.is_null()))
    {
        return BAD_ARGS;
    }
    let values = if values_len == 0 {
        &[][..]
    } else {
        slice::from_raw_parts(values, values_len)
    };
    let (inverse, slots, rows) = if n == 0 {
        (&[][..], &[][..], &[][..])
    } else {
        (
            slice::from_raw_parts(inverse, n),
            slice::from_raw_parts(slots, n),
            slice::from_raw_parts(rows, n),
        )
    };
    let out = if out_len == 0 {
        &mut [][..]
    } else {
        slice::from_raw_parts_mut(out, out_len)
    };
    match pool_into(values, dim, inverse, slots, rows, slot_count, count, out) {
        Some(()) => 0,
        None => BAD_ARGS,
    }
}

#[allow(clippy::too_many_arguments)]
fn pool_into(
    values: &[f32],
    dim: usize,
    inverse: &[i64],
    slots: &[i32],
    rows: &[i32],
    slot_count: usize,
    count: usize,
    out: &mut [f32],
) -> Option<()> {
    let mut sums = vec![0f64; out.len()];
    for ((&v, &s), &r) in inverse.iter().zip(slots).zip(rows) {
        let (v, s, r) = (
            usize::try_from(v).ok()?,
            usize::try_from(s).ok()?,
            usize::try_from(r).ok()?,
        );
        if s >= slot_count || r >= count {
            return None;
        }
        let cell = s.checked_mul(count)?.checked_add(r)?.checked_mul(dim)?;
        let source = values.get(v.checked_mul(dim)?..v.checked_mul(dim)?.checked_add(dim)?)?;
        let target = sums.get_mut(cell..cell.checked_add(dim)?)?;
        for (sum, &value) in target.iter_mut().zip(source) {
            *sum += f64::from(value);
        }
    }
    for (o, &sum) in out.iter_mut().zip(&sums) {
        *o = sum as f32;
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What one parse gives: the example count, raw keys, slots and rows.
    type Parsed = (i64, Vec<u64>, Vec<i32>, Vec<i32>);

    fn parse(body: &str, plain: bool) -> Option<Parsed> {
        let names = b"101\n102\n103\n12345678901";
        let cap = body.len() / 2 + 1;
        let (mut raw, mut slots, mut rows) = (vec![0u64; cap], vec![0i32; cap], vec![0i32; cap]);
        let mut count = 0i64;
        let n = unsafe {
            elasticctr_parse(
                body.as_ptr(),
                body.len(),
                names.as_ptr(),
                names.len(),
                i32::from(plain),
                10,
                raw.as_mut_ptr(),
                slots.as_mut_ptr(),
                rows.as_mut_ptr(),
                cap,
                &mut count,
            )
        };
        if n < 0 {
            return None;
        }
        let n = n as usize;
        Some((
            count,
            raw[..n].to_vec(),
            slots[..n].to_vec(),
            rows[..n].to_vec(),
        ))
    }

    #[test]
    fn elasticctr_form() {
        let body = r#" {"instances": [{"slots": [{"slot_name": "101", "feasigns": [1005, 0]},
            {"feasigns": [18446744073709551615], "slot_name": "12345678901"}]},
            {"slots":[{"slot_name":"102","feasigns":[3]},{"slot_name":"101","feasigns":[]}]}]} "#;
        let (count, raw, slots, rows) = parse(body, false).unwrap();
        assert_eq!(count, 2);
        assert_eq!(raw, vec![1005, 0, u64::MAX, 3]);
        assert_eq!(slots, vec![0, 0, 3, 1]);
        assert_eq!(rows, vec![0, 0, 0, 1]);
    }

    #[test]
    fn feasigns_up_to_2_to_the_64_minus_1() {
        let one = |f: &str| {
            let body = format!(r#"{{"instances": [{{"101": [{f}]}}]}}"#);
            parse(&body, true).map(|(_, raw, _, _)| raw[0])
        };
        assert_eq!(one("0"), Some(0));
        assert_eq!(one("9999999999999999999"), Some(9_999_999_999_999_999_999));
        assert_eq!(
            one("10000000000000000000"),
            Some(10_000_000_000_000_000_000)
        );
        assert_eq!(one("18446744073709551615"), Some(u64::MAX));
        for bad in [
            "18446744073709551616",
            "99999999999999999999",
            "100000000000000000000",
        ] {
            assert_eq!(one(bad), None, "{bad}");
        }
    }

    #[test]
    fn unique_and_pool() {
        let keys = [7u64, 3, 7, 9, 3, 3];
        let (mut unique, mut inverse) = ([0u64; 6], [0i64; 6]);
        let m = unsafe {
            elasticctr_unique(keys.as_ptr(), 6, unique.as_mut_ptr(), inverse.as_mut_ptr())
        };
        assert_eq!(m, 3);
        assert_eq!(&unique[..3], &[7, 3, 9]);
        assert_eq!(inverse, [0, 1, 0, 2, 1, 1]);
        let values = [1.0f32, 10.0, 2.0, 20.0, 4.0, 40.0]; // 3 keys x dim 2
        let (slots, rows) = ([0i32, 1, 0, 1, 0, 1], [0i32, 0, 0, 1, 1, 1]);
        let mut out = [0f32; 8]; // 2 slots x 2 rows x 2
        let ok = unsafe {
            elasticctr_pool(
                values.as_ptr(),
                3,
                2,
                inverse.as_ptr(),
                slots.as_ptr(),
                rows.as_ptr(),
                6,
                2,
                2,
                out.as_mut_ptr(),
            )
        };
        assert_eq!(ok, 0);
        assert_eq!(out, [2.0, 20.0, 2.0, 20.0, 2.0, 20.0, 6.0, 60.0]);
        let bad = [0i32, 2, 0, 1, 0, 1]; // slot 2 of 2
        let err = unsafe {
            elasticctr_pool(
                values.as_ptr(),
                3,
                2,
                inverse.as_ptr(),
                bad.as_ptr(),
                rows.as_ptr(),
                6,
                2,
                2,
                out.as_mut_ptr(),
            )
        };
        assert_eq!(err, BAD_ARGS);
    }

    #[test]
    fn plain_form() {
        let (count, raw, slots, rows) = parse(
            r#"{"instances":[{"103":[7],"101":[1,2]},{"102":[0]}]}"#,
            true,
        )
        .unwrap();
        assert_eq!(
            (count, raw, slots, rows),
            (2, vec![7, 1, 2, 0], vec![2, 0, 0, 1], vec![0, 0, 0, 1])
        );
    }

    #[test]
    fn everything_else_is_left_to_python() {
        for body in [
            "",
            "{",
            "[1]",
            r#"{"instances": []}"#,
            r#"{"instances": [{"slots": []}]}"#,
            r#"{"instances": [{"slots": [{"slot_name": "101", "feasigns": []}]}]}"#,
            r#"{"instances": [{"slots": [{"slot_name": "999", "feasigns": [1]}]}]}"#,
            r#"{"instances": [{"slots": [{"slot_name": 101, "feasigns": [1]}]}]}"#,
            r#"{"instances": [{"slots": [{"slot_name": "10\u0031", "feasigns": [1]}]}]}"#,
            r#"{"instances": [{"slots": [{"slot_name": "101", "feasigns": ["1"]}]}]}"#,
            r#"{"instances": [{"slots": [{"slot_name": "101", "feasigns": [1.5]}]}]}"#,
            r#"{"instances": [{"slots": [{"slot_name": "101", "feasigns": [1e3]}]}]}"#,
            r#"{"instances": [{"slots": [{"slot_name": "101", "feasigns": [-1]}]}]}"#,
            r#"{"instances": [{"slots": [{"slot_name": "101", "feasigns": [01]}]}]}"#,
            r#"{"instances": [{"slots": [{"slot_name": "101", "feasigns": [18446744073709551616]}]}]}"#,
            r#"{"instances": [{"slots": [{"slot_name": "101", "feasigns": [true]}]}]}"#,
            r#"{"instances": [{"slots": [{"slot_name": "101", "feasigns": [1,]}]}]}"#,
            r#"{"instances": [{"slots": [{"slot_name": "101", "slot_name": "101"}]}]}"#,
            r#"{"instances": [{"slots": [{"slot_name": "101", "feasigns": [1], "x": 1}]}]}"#,
            r#"{"instances": [{"slots": [{"slot_name": "101", "feasigns": [1]}], "x": 1}]}"#,
            r#"{"instances": [{"slots": [{"slot_name": "101", "feasigns": [1]}]}], "x": 1}"#,
            r#"{"instances": [{"slots": [{"slot_name": "101", "feasigns": [1]}]}]} x"#,
            r#"{"instances": [{"slots": [{"slot_name": "101", "feasigns": [1]}]}]"#,
        ] {
            assert_eq!(parse(body, false), None, "{body}");
        }
        for body in [
            r#"{"instances": [{}]}"#,
            r#"{"instances": [{"101": [1], "101": [2]}]}"#,
            r#"{"instances": [{"101": []}]}"#,
            r#"{"instances": [{"101": [1],}]}"#,
        ] {
            assert_eq!(parse(body, true), None, "{body}");
        }
        let eleven = format!(
            r#"{{"instances": [{}]}}"#,
            [r#"{"101": [1]}"#; 11].join(",")
        );
        assert_eq!(parse(&eleven, true), None);
    }
}
