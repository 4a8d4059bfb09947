//! The binary batch protocol (docs/cube.md): fixed little-endian headers, raw values.
//!
//! Request:  magic CB 'C' 'Q' 01 | flags u32 (bit 0: version pinned) | version u64 |
//!           count u32 | reserved u32 | count x u64 keys
//! Response: magic CB 'C' 'R' 01 | status u32 | version u64 | count u32 | dim u32 |
//!           missing u32 | reserved u32 | then, if status 0: count x dim x f32 values
//!           (zeros for missing keys) and ceil(count/8) bytes of found-bits (LSB first);
//!           else `count` bytes of UTF-8 error message.

use crate::metrics::Protocol;
use crate::state::State;
use std::io::{self, BufRead, Write};
use std::time::Instant;

pub const REQUEST_MAGIC: [u8; 4] = [0xCB, b'C', b'Q', 1];
pub const RESPONSE_MAGIC: [u8; 4] = [0xCB, b'C', b'R', 1];
pub const FLAG_PINNED: u32 = 1;

pub const OK: u32 = 0;
pub const BAD_REQUEST: u32 = 1;
pub const UNKNOWN_VERSION: u32 = 2;
pub const TOO_LARGE: u32 = 3;
pub const NOT_READY: u32 = 4;

/// Per-connection buffers, reused from request to request.
#[derive(Default)]
pub struct Scratch {
    keys: Vec<u64>,
    out: Vec<u8>,
}

/// Serve one binary request. Ok(false) means: close the connection.
pub fn handle(
    r: &mut impl BufRead,
    w: &mut impl Write,
    state: &State,
    s: &mut Scratch,
) -> io::Result<bool> {
    let mut head = [0u8; 24];
    r.read_exact(&mut head)?;
    let started = Instant::now();
    let flags = u32::from_le_bytes(head[4..8].try_into().unwrap());
    let version = u64::from_le_bytes(head[8..16].try_into().unwrap());
    let count = u32::from_le_bytes(head[16..20].try_into().unwrap()) as usize;
    state.metrics.seek(Protocol::Binary);
    if head[0..4] != REQUEST_MAGIC {
        return fail(
            w,
            state,
            BAD_REQUEST,
            format!("bad request magic {:02x?}", &head[0..4]),
        )
        .map(|_| false);
    }
    if count > state.config.max_keys {
        let msg = format!(
            "request of {count} keys exceeds the limit of {} keys",
            state.config.max_keys
        );
        return fail(w, state, TOO_LARGE, msg).map(|_| false);
    }
    s.keys.resize(count, 0);
    // SAFETY: viewing initialised u64s as bytes; any byte pattern is a valid u64.
    let key_bytes =
        unsafe { std::slice::from_raw_parts_mut(s.keys.as_mut_ptr() as *mut u8, count * 8) };
    r.read_exact(key_bytes)?;
    let pinned = (flags & FLAG_PINNED != 0).then_some(version);
    let dict = match state.dict_for(pinned) {
        Ok(d) => d,
        Err((code, msg)) => {
            let status = if code == 503 {
                NOT_READY
            } else {
                UNKNOWN_VERSION
            };
            return fail(w, state, status, msg).map(|_| true);
        }
    };
    let vb = dict.value_bytes;
    let values_len = count * vb;
    s.out.resize(32 + values_len + count.div_ceil(8), 0);
    let (head_out, body) = s.out.split_at_mut(32);
    let (values, found) = body.split_at_mut(values_len);
    let missing = dict.seek_batch(&s.keys, values, found);
    head_out[0..4].copy_from_slice(&RESPONSE_MAGIC);
    head_out[4..8].copy_from_slice(&OK.to_le_bytes());
    head_out[8..16].copy_from_slice(&dict.version.to_le_bytes());
    head_out[16..20].copy_from_slice(&(count as u32).to_le_bytes());
    head_out[20..24].copy_from_slice(&dict.dim.to_le_bytes());
    head_out[24..28].copy_from_slice(&missing.to_le_bytes());
    head_out[28..32].copy_from_slice(&0u32.to_le_bytes());
    drop(dict);
    state.metrics.keys.inc_by(count as u64);
    state.metrics.missing.inc_by(u64::from(missing));
    w.write_all(&s.out)?;
    w.flush()?;
    let seconds = started.elapsed().as_secs_f64();
    state.metrics.seek_seconds(Protocol::Binary, seconds);
    Ok(true)
}

fn fail(w: &mut impl Write, state: &State, status: u32, msg: String) -> io::Result<()> {
    state.metrics.errors.inc();
    let mut out = Vec::with_capacity(32 + msg.len());
    out.extend_from_slice(&RESPONSE_MAGIC);
    out.extend_from_slice(&status.to_le_bytes());
    out.extend_from_slice(&[0u8; 8]);
    out.extend_from_slice(&(msg.len() as u32).to_le_bytes());
    out.extend_from_slice(&[0u8; 12]);
    out.extend_from_slice(msg.as_bytes());
    w.write_all(&out)?;
    w.flush()
}
