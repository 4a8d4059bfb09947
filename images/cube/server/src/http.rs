//! HTTP/1.1 (Content-Length bodies, keep-alive): the cube JSON seek API, control, health.
//!
//! Two ports, two sets of endpoints. The data port (readers: serving, Paddle's clients)
//! takes seeks and read-only status; the control port (loads, switches, unloads: the
//! shard's agent) listens on loopback by default, so that a NetworkPolicy, which can tell
//! ports apart but not paths, can let readers in without letting them change versions.

use crate::metrics::{Protocol, CONTENT_TYPE};
use crate::state::{Failure, State};
use base64::prelude::{Engine, BASE64_STANDARD};
use serde_json::{json, Value};
use std::io::{self, BufRead, Read, Write};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::time::Instant;

const MAX_HEADER_BYTES: usize = 64 * 1024;
/// A missing key's status in the seek answer: Paddle Serving's cube sets -1 as uint32.
const MISSING_STATUS: u32 = u32::MAX;

/// Which listener a request came in on.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Port {
    Data,
    Control,
}

const CONTROL_COMMANDS: [&str; 3] = ["/control/load", "/control/switch", "/control/unload"];

struct Request {
    method: String,
    path: String,
    body: Vec<u8>,
    keep_alive: bool,
}

/// Serve one HTTP request. Ok(false) means: close the connection.
pub fn handle(
    r: &mut impl BufRead,
    w: &mut impl Write,
    state: &Arc<State>,
    port: Port,
) -> io::Result<bool> {
    let max_body = state
        .config
        .max_keys
        .saturating_mul(32)
        .saturating_add(4096);
    let req = match read_request(r, max_body)? {
        Ok(req) => req,
        Err((code, msg)) => {
            respond(w, code, &error_json(&msg), false)?;
            return Ok(false);
        }
    };
    if req.path == "/metrics" {
        respond_as(w, 200, CONTENT_TYPE, &state.metrics_text(), req.keep_alive)?;
        return Ok(req.keep_alive);
    }
    let started = Instant::now();
    let (code, body) = match route(&req, state, port) {
        Ok((code, body)) => (code, body),
        Err((code, msg)) => {
            state.metrics.errors.inc();
            (code, error_json(&msg))
        }
    };
    respond(w, code, &body, req.keep_alive)?;
    if req.path == "/DictService/seek" && port == Port::Data {
        let seconds = started.elapsed().as_secs_f64();
        state.metrics.seek_seconds(Protocol::Http, seconds);
    }
    Ok(req.keep_alive)
}

/// Headers of one request at most (more: 431): a reader's request carries a handful.
const MAX_HEADERS: usize = 64;

fn read_request(r: &mut impl BufRead, max_body: usize) -> io::Result<Result<Request, Failure>> {
    let head = match read_head(r)? {
        Ok(head) => head,
        Err(failure) => return Ok(Err(failure)),
    };
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut headers);
    match parsed.parse(&head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Ok(Err((400, "incomplete request head".into()))),
        Err(httparse::Error::TooManyHeaders) => {
            return Ok(Err((431, format!("more than {MAX_HEADERS} header fields"))))
        }
        Err(e) => {
            let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
            return Ok(Err((
                400,
                format!(
                    "malformed request ({e}) in {:?}",
                    String::from_utf8_lossy(line).trim_end()
                ),
            )));
        }
    }
    let mut keep_alive = parsed.version == Some(1);
    let mut length: Option<usize> = None;
    for h in parsed.headers.iter() {
        let value = String::from_utf8_lossy(h.value);
        let value = value.trim();
        if h.name.eq_ignore_ascii_case("content-length") {
            match value.parse() {
                // Two different lengths: which one a proxy in front used is unknowable.
                Ok(n) if length.is_none_or(|l| l == n) => length = Some(n),
                Ok(_) => return Ok(Err((400, "conflicting Content-Length headers".into()))),
                Err(_) => return Ok(Err((400, format!("bad Content-Length {value:?}")))),
            }
        } else if h.name.eq_ignore_ascii_case("transfer-encoding")
            && !value.eq_ignore_ascii_case("identity")
        {
            return Ok(Err((
                411,
                "chunked bodies are not supported: send Content-Length".into(),
            )));
        } else if h.name.eq_ignore_ascii_case("connection") {
            keep_alive = !value.eq_ignore_ascii_case("close")
                && (keep_alive || value.eq_ignore_ascii_case("keep-alive"));
        }
    }
    let length = length.unwrap_or(0);
    if length > max_body {
        return Ok(Err((
            413,
            format!("request body of {length} bytes exceeds the limit of {max_body} bytes"),
        )));
    }
    let (Some(method), Some(target)) = (parsed.method, parsed.path) else {
        return Ok(Err((400, "incomplete request line".into())));
    };
    let mut request = Request {
        method: method.to_string(),
        path: target.split('?').next().unwrap_or("").to_string(),
        body: vec![0u8; length],
        keep_alive,
    };
    r.read_exact(&mut request.body)?;
    Ok(Ok(request))
}

/// The request line and header fields, through the blank line that ends them (at most
/// MAX_HEADER_BYTES; blank lines before the request line are skipped, RFC 9112 2.2).
fn read_head(r: &mut impl BufRead) -> io::Result<Result<Vec<u8>, Failure>> {
    let mut head = Vec::with_capacity(512);
    loop {
        let before = head.len();
        let n = r
            .by_ref()
            .take((MAX_HEADER_BYTES + 1 - before) as u64)
            .read_until(b'\n', &mut head)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed mid-header",
            ));
        }
        if head.len() > MAX_HEADER_BYTES {
            return Ok(Err((431, "request header too large".into())));
        }
        if head[before..].iter().all(|b| *b == b'\r' || *b == b'\n') {
            if before > 0 {
                return Ok(Ok(head));
            }
            head.clear();
        }
    }
}

fn respond(w: &mut impl Write, code: u16, body: &str, keep_alive: bool) -> io::Result<()> {
    respond_as(w, code, "application/json", body, keep_alive)
}

fn respond_as(
    w: &mut impl Write,
    code: u16,
    content_type: &str,
    body: &str,
    keep_alive: bool,
) -> io::Result<()> {
    let reason = match code {
        200 => "OK",
        202 => "Accepted",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Payload Too Large",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Error",
    };
    let conn = if keep_alive { "keep-alive" } else { "close" };
    let head = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: {conn}\r\n\r\n",
        body.len()
    );
    w.write_all(head.as_bytes())?;
    w.write_all(body.as_bytes())?;
    w.flush()
}

fn error_json(msg: &str) -> String {
    json!({ "error": msg }).to_string()
}

fn route(req: &Request, state: &Arc<State>, port: Port) -> Result<(u16, String), Failure> {
    let post = req.method == "POST";
    let command = CONTROL_COMMANDS.contains(&req.path.as_str());
    if port == Port::Data && command {
        return Err((
            403,
            format!(
                "{} is served on the control port (--control-port), for this shard's agent",
                req.path
            ),
        ));
    }
    if port == Port::Control && req.path == "/DictService/seek" {
        return Err((404, "seek is served on the data port (--port)".into()));
    }
    match (req.path.as_str(), post) {
        ("/healthz", _) => Ok((200, "{\"status\":\"ok\"}".into())),
        ("/readyz", _) if state.stopping.load(SeqCst) => {
            Ok((503, "{\"ready\":false,\"error\":\"stopping\"}".into()))
        }
        ("/readyz", _) => match state.current_version() {
            Some(v) => Ok((200, json!({"ready": true, "version": v}).to_string())),
            None => Ok((
                503,
                "{\"ready\":false,\"error\":\"no version is switched in\"}".into(),
            )),
        },
        ("/control/status", _) => Ok((200, state.status_json())),
        ("/DictService/seek", true) => seek(&parse(&req.body)?, state),
        ("/control/load", true) => {
            let cmd = parse(&req.body)?;
            let version = version_of(&cmd)?.ok_or((400, "load needs \"version\"".to_string()))?;
            let result = state.start_load(version, load_paths(&cmd)?)?;
            Ok((
                202,
                json!({"result": result, "version": version}).to_string(),
            ))
        }
        ("/control/switch", true) => {
            let version = version_of(&parse(&req.body)?)?
                .ok_or((400, "switch needs \"version\"".to_string()))?;
            let result = state.switch(version)?;
            Ok((
                200,
                json!({"result": result, "version": version}).to_string(),
            ))
        }
        ("/control/unload", true) => {
            let result = state.unload(version_of(&parse(&req.body)?)?)?;
            Ok((200, json!({ "result": result }).to_string()))
        }
        ("/DictService/seek" | "/control/load" | "/control/switch" | "/control/unload", false) => {
            Err((405, format!("{} needs POST", req.path)))
        }
        _ => Err((404, format!("no such endpoint {} {}", req.method, req.path))),
    }
}

/// A load's files: "path" (a base, or a delta on a held version), or "chain" (a base and
/// the deltas on it, or deltas on a held version, in order).
fn load_paths(cmd: &Value) -> Result<Vec<String>, Failure> {
    let wanted = || {
        (
            400,
            "load needs \"path\" (a shard file on this pod) or \"chain\" (a list of them)"
                .to_string(),
        )
    };
    match (cmd.get("path"), cmd.get("chain")) {
        (Some(Value::String(p)), None) => Ok(vec![p.clone()]),
        (None, Some(Value::Array(files))) if !files.is_empty() => files
            .iter()
            .map(|f| f.as_str().map(str::to_string).ok_or_else(wanted))
            .collect(),
        _ => Err(wanted()),
    }
}

fn parse(body: &[u8]) -> Result<Value, Failure> {
    if body.is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    let v: Value =
        serde_json::from_slice(body).map_err(|e| (400, format!("body is not JSON: {e}")))?;
    if v.is_object() {
        Ok(v)
    } else {
        Err((400, "body must be a JSON object".into()))
    }
}

/// "version" as a JSON integer or a decimal string (Paddle's cube uses strings).
fn version_of(cmd: &Value) -> Result<Option<u64>, Failure> {
    match cmd.get("version") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => u64_of(v).map(Some).ok_or((
            400,
            format!("\"version\" must be an unsigned integer, got {v}"),
        )),
    }
}

fn u64_of(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

fn seek(cmd: &Value, state: &State) -> Result<(u16, String), Failure> {
    state.metrics.seek(Protocol::Http);
    let keys = cmd
        .get("keys")
        .and_then(Value::as_array)
        .ok_or((400, "seek needs \"keys\": [uint64, ...]".to_string()))?;
    if keys.len() > state.config.max_keys {
        return Err((
            413,
            format!(
                "request of {} keys exceeds the limit of {} keys",
                keys.len(),
                state.config.max_keys
            ),
        ));
    }
    let keys: Vec<u64> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            u64_of(k).ok_or((
                400,
                format!("keys[{i}] = {k} is not an unsigned 64-bit integer"),
            ))
        })
        .collect::<Result<_, _>>()?;
    let dict = state.dict_for(version_of(cmd)?)?;
    let mut out = String::with_capacity(32 + keys.len() * (dict.value_bytes * 4 / 3 + 32));
    out.push_str("{\"values\":[");
    let mut missing = 0u64;
    for (i, &k) in keys.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        match dict.get(k) {
            Some(v) => {
                out.push_str("{\"status\":0,\"value\":\"");
                BASE64_STANDARD.encode_string(v, &mut out);
                out.push_str("\"}");
            }
            None => {
                missing += 1;
                out.push_str(&format!("{{\"status\":{MISSING_STATUS},\"value\":\"\"}}"));
            }
        }
    }
    out.push_str(&format!("],\"version\":{}}}", dict.version));
    state.metrics.keys.inc_by(keys.len() as u64);
    state.metrics.missing.inc_by(missing);
    Ok((200, out))
}
