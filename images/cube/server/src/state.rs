//! The versions a server holds (current + background), background loads, and counters.

use crate::conns::Conns;
use crate::shardfile::ShardFile;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

pub struct Config {
    pub shard: u32,
    pub shard_num: u32,
    pub max_keys: usize,
    pub max_connections: usize,
}

#[derive(Clone)]
pub enum LoadState {
    Loading,
    Loaded,
    Failed(String),
    Cancelled,
}

#[derive(Clone)]
pub struct Load {
    pub version: u64,
    pub path: String,
    pub state: LoadState,
    pub seconds: f64,
    generation: u64,
}

#[derive(Default)]
struct Slots {
    current: Option<Arc<ShardFile>>,
    background: Option<Arc<ShardFile>>,
}

#[derive(Default)]
pub struct Counters {
    pub requests: AtomicU64,
    pub keys: AtomicU64,
    pub missing: AtomicU64,
    pub errors: AtomicU64,
}

pub struct State {
    pub config: Config,
    pub counters: Counters,
    pub conns: Conns,
    slots: RwLock<Slots>,
    load: Mutex<Option<Load>>,
    generation: AtomicU64,
    started: Instant,
    /// SIGTERM came: /readyz answers 503 (stop.rs).
    pub stopping: AtomicBool,
    /// Then the listener closed: each connection closes after its answer.
    pub closing: AtomicBool,
}

/// An error of a control command or a seek: (HTTP status, message).
pub type Failure = (u16, String);

impl State {
    pub fn new(config: Config) -> State {
        State {
            conns: Conns::new(config.max_connections),
            config,
            counters: Counters::default(),
            slots: RwLock::new(Slots::default()),
            load: Mutex::new(None),
            generation: AtomicU64::new(0),
            started: Instant::now(),
            stopping: AtomicBool::new(false),
            closing: AtomicBool::new(false),
        }
    }

    /// Milliseconds since the server started, plus 1 (0 means "never").
    fn clock(&self) -> u64 {
        self.started.elapsed().as_millis() as u64 + 1
    }

    /// The version a seek reads: the pinned one if it is held, else the current one.
    pub fn dict_for(&self, pinned: Option<u64>) -> Result<Arc<ShardFile>, Failure> {
        let dict = self.find(pinned)?;
        let now = self.clock();
        if dict.last_read.load(Relaxed) != now {
            dict.last_read.store(now, Relaxed); // at most one write per ms and version
        }
        Ok(dict)
    }

    fn find(&self, pinned: Option<u64>) -> Result<Arc<ShardFile>, Failure> {
        let slots = self.slots.read().unwrap();
        match pinned {
            None => slots
                .current
                .clone()
                .ok_or((503, "no version is loaded and switched in yet".to_string())),
            Some(v) => [&slots.current, &slots.background]
                .into_iter()
                .flatten()
                .find(|d| d.version == v)
                .cloned()
                .ok_or_else(|| {
                    (
                        409,
                        format!("version {v} is not held by this shard ({})", held(&slots)),
                    )
                }),
        }
    }

    pub fn current_version(&self) -> Option<u64> {
        self.slots
            .read()
            .unwrap()
            .current
            .as_ref()
            .map(|d| d.version)
    }

    /// Start loading `path` as `version` into the background slot, in a thread.
    pub fn start_load(
        self: &Arc<Self>,
        version: u64,
        path: String,
    ) -> Result<&'static str, Failure> {
        {
            let slots = self.slots.read().unwrap();
            if [&slots.current, &slots.background]
                .into_iter()
                .flatten()
                .any(|d| d.version == version)
            {
                return Ok("already held");
            }
        }
        let mut load = self.load.lock().unwrap();
        if let Some(l) = load.as_ref() {
            if matches!(l.state, LoadState::Loading) {
                if l.version == version && l.path == path {
                    return Ok("already loading");
                }
                return Err((
                    409,
                    format!("busy loading version {} from {}", l.version, l.path),
                ));
            }
        }
        // At most two versions are mapped: the new one replaces the background one, which
        // is dropped now rather than after the load (as Paddle's cube does in bg_load).
        if let Some(old) = self.slots.write().unwrap().background.take() {
            eprintln!(
                "cube-server: dropped background version {} to load {version}",
                old.version
            );
        }
        let generation = self.generation.fetch_add(1, Relaxed) + 1;
        *load = Some(Load {
            version,
            path: path.clone(),
            state: LoadState::Loading,
            seconds: 0.0,
            generation,
        });
        drop(load);
        let state = Arc::clone(self);
        std::thread::Builder::new()
            .name(format!("load-{version}"))
            .spawn(move || state.run_load(version, path, generation))
            .map_err(|e| (500, format!("cannot start a load thread: {e}")))?;
        Ok("loading")
    }

    fn run_load(&self, version: u64, path: String, generation: u64) {
        let t0 = Instant::now();
        let result = ShardFile::open(&path).and_then(|d| self.check(d, version));
        let mut load = self.load.lock().unwrap();
        let Some(l) = load.as_mut().filter(|l| l.generation == generation) else {
            return;
        };
        l.seconds = t0.elapsed().as_secs_f64();
        if matches!(l.state, LoadState::Cancelled) {
            return; // unloaded while loading: drop the file
        }
        match result {
            Ok(dict) => {
                eprintln!(
                    "cube-server: loaded version {version} from {path} ({} keys) in {:.3}s",
                    dict.key_count, l.seconds
                );
                self.slots.write().unwrap().background = Some(Arc::new(dict));
                l.state = LoadState::Loaded;
            }
            Err(msg) => {
                eprintln!("cube-server: load of version {version} failed: {msg}");
                l.state = LoadState::Failed(msg);
            }
        }
    }

    fn check(&self, d: ShardFile, version: u64) -> Result<ShardFile, String> {
        let c = &self.config;
        if d.version != version {
            return Err(format!(
                "{}: holds version {}, asked to load version {version}",
                d.path, d.version
            ));
        }
        if d.shard != c.shard || d.shard_num != c.shard_num {
            return Err(format!(
                "{}: is shard {} of {}, this server is shard {} of {}",
                d.path, d.shard, d.shard_num, c.shard, c.shard_num
            ));
        }
        Ok(d)
    }

    /// Make background version `version` current; the old current becomes background.
    pub fn switch(&self, version: u64) -> Result<&'static str, Failure> {
        let mut slots = self.slots.write().unwrap();
        if slots.current.as_ref().is_some_and(|d| d.version == version) {
            return Ok("already current");
        }
        if slots
            .background
            .as_ref()
            .is_none_or(|d| d.version != version)
        {
            return Err((
                409,
                format!(
                    "cannot switch to version {version}: not loaded ({})",
                    held(&slots)
                ),
            ));
        }
        let Slots {
            current,
            background,
        } = &mut *slots;
        std::mem::swap(current, background);
        eprintln!("cube-server: switched to version {version}");
        Ok("switched")
    }

    /// Drop the background version (only `version`, if given) and cancel a load of it.
    pub fn unload(&self, version: Option<u64>) -> Result<&'static str, Failure> {
        let mut result = "nothing to unload";
        {
            let mut load = self.load.lock().unwrap();
            if let Some(l) = load.as_mut() {
                if matches!(l.state, LoadState::Loading) && version.is_none_or(|v| v == l.version) {
                    l.state = LoadState::Cancelled;
                    result = "load cancelled";
                }
            }
        }
        let mut slots = self.slots.write().unwrap();
        if let Some(v) = version {
            if slots.current.as_ref().is_some_and(|d| d.version == v) {
                return Err((
                    409,
                    format!("version {v} is current: switch away from it before unloading"),
                ));
            }
        }
        if slots
            .background
            .as_ref()
            .is_some_and(|d| version.is_none_or(|v| v == d.version))
        {
            slots.background = None;
            result = "unloaded";
        }
        Ok(result)
    }

    pub fn status_json(&self) -> String {
        // Lock order everywhere: load, then slots.
        let load = self.load.lock().unwrap().clone();
        let slots = self.slots.read().unwrap();
        let (c, now) = (&self.counters, self.clock());
        json!({
            "shard": self.config.shard,
            "shard_num": self.config.shard_num,
            "ready": slots.current.is_some(),
            "cur_version": slots.current.as_ref().map(|d| d.version),
            "bg_version": slots.background.as_ref().map(|d| d.version),
            "current": slots.current.as_deref().map(|d| dict_json(d, now)),
            "background": slots.background.as_deref().map(|d| dict_json(d, now)),
            "load": load.as_ref().map(load_json),
            "max_keys": self.config.max_keys,
            "uptime_seconds": self.started.elapsed().as_secs_f64(),
            "requests": c.requests.load(Relaxed),
            "keys": c.keys.load(Relaxed),
            "missing_keys": c.missing.load(Relaxed),
            "errors": c.errors.load(Relaxed),
            "connections": self.conns.count(),
            "idle_closed": self.conns.evicted.load(Relaxed),
        })
        .to_string()
    }
}

fn held(slots: &Slots) -> String {
    let v = |d: &Option<Arc<ShardFile>>| {
        d.as_ref()
            .map_or("none".to_string(), |d| d.version.to_string())
    };
    format!(
        "current {}, background {}",
        v(&slots.current),
        v(&slots.background)
    )
}

/// A held version; `idle_seconds`: since a seek last read it (null: never read).
fn dict_json(d: &ShardFile, now: u64) -> Value {
    let read = d.last_read.load(Relaxed);
    json!({
        "version": d.version,
        "keys": d.key_count,
        "dim": d.dim,
        "bytes": d.file_bytes,
        "path": d.path,
        "idle_seconds": (read != 0).then(|| now.saturating_sub(read) as f64 / 1000.0),
    })
}

fn load_json(l: &Load) -> Value {
    let (state, error) = match &l.state {
        LoadState::Loading => ("loading", None),
        LoadState::Loaded => ("loaded", None),
        LoadState::Failed(m) => ("failed", Some(m.as_str())),
        LoadState::Cancelled => ("cancelled", None),
    };
    json!({"version": l.version, "path": l.path, "state": state, "error": error, "seconds": l.seconds})
}
