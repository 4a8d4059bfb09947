//! The versions a server holds (current + background), background loads, and metrics.

use crate::conns::Conns;
use crate::dict::Dict;
use crate::metrics::{Held, Metrics, Snapshot};
use crate::shardfile::{self, ShardFile};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed, Ordering::SeqCst};
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
    /// The files loaded in order: a base and deltas, or deltas on a held parent.
    pub paths: Vec<String>,
    pub state: LoadState,
    pub seconds: f64,
    generation: u64,
}

#[derive(Default)]
struct Slots {
    current: Option<Arc<Dict>>,
    background: Option<Arc<Dict>>,
}

pub struct State {
    pub config: Config,
    pub metrics: Metrics,
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
            metrics: Metrics::new(),
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
    pub fn dict_for(&self, pinned: Option<u64>) -> Result<Arc<Dict>, Failure> {
        let dict = self.find(pinned)?;
        let now = self.clock();
        if dict.last_read.load(Relaxed) != now {
            dict.last_read.store(now, Relaxed); // at most one write per ms and version
        }
        Ok(dict)
    }

    fn find(&self, pinned: Option<u64>) -> Result<Arc<Dict>, Failure> {
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
                        format!(
                            "version {v} is not held by this shard ({})",
                            held_text(&slots)
                        ),
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

    /// Start loading `paths` as `version` into the background slot, in a thread: a base
    /// and the deltas on it in order, or deltas whose first one's parent this server holds
    /// (current or background). A delta on a version not held is refused here, before
    /// anything is dropped: it is never applied on another version.
    pub fn start_load(
        self: &Arc<Self>,
        version: u64,
        paths: Vec<String>,
    ) -> Result<&'static str, Failure> {
        let Some(first) = paths.first() else {
            return Err((400, "load needs a shard file".to_string()));
        };
        let parent = {
            let slots = self.slots.read().unwrap();
            let held = || [&slots.current, &slots.background].into_iter().flatten();
            if held().any(|d| d.version == version) {
                return Ok("already held");
            }
            // A file that cannot be read fails the load itself (its state says why).
            match shardfile::read_header(first).ok().and_then(|h| h.parent) {
                None => None,
                Some(p) => Some(held().find(|d| d.version == p).cloned().ok_or_else(|| {
                    (
                        409,
                        format!(
                            "{first} is a delta on version {p}, which this shard does not hold \
                             ({}): load it with its chain from a base",
                            held_text(&slots)
                        ),
                    )
                })?),
            }
        };
        let mut load = self.load.lock().unwrap();
        if let Some(l) = load.as_ref() {
            if matches!(l.state, LoadState::Loading) {
                if l.version == version && l.paths == paths {
                    return Ok("already loading");
                }
                return Err((
                    409,
                    format!(
                        "busy loading version {} from {}",
                        l.version,
                        l.paths.join(", ")
                    ),
                ));
            }
        }
        // At most two versions are mapped: the new one replaces the background one, which
        // is dropped now rather than after the load (as Paddle's cube does in bg_load). A
        // delta on it keeps the files they share (`parent`).
        if let Some(old) = self.slots.write().unwrap().background.take() {
            eprintln!(
                "cube-server: dropped background version {} to load {version}",
                old.version
            );
        }
        let generation = self.generation.fetch_add(1, Relaxed) + 1;
        *load = Some(Load {
            version,
            paths: paths.clone(),
            state: LoadState::Loading,
            seconds: 0.0,
            generation,
        });
        drop(load);
        let state = Arc::clone(self);
        std::thread::Builder::new()
            .name(format!("load-{version}"))
            .spawn(move || state.run_load(version, paths, parent, generation))
            .map_err(|e| (500, format!("cannot start a load thread: {e}")))?;
        Ok("loading")
    }

    fn run_load(
        &self,
        version: u64,
        paths: Vec<String>,
        parent: Option<Arc<Dict>>,
        generation: u64,
    ) {
        let t0 = Instant::now();
        let result = self.open_chain(version, &paths, parent);
        let mut load = self.load.lock().unwrap();
        let Some(l) = load.as_mut().filter(|l| l.generation == generation) else {
            return;
        };
        l.seconds = t0.elapsed().as_secs_f64();
        if matches!(l.state, LoadState::Cancelled) {
            self.metrics.load("cancelled");
            return; // unloaded while loading: drop the files
        }
        match result {
            Ok(dict) => {
                eprintln!(
                    "cube-server: loaded version {version} (chain {:?}) from {} in {:.3}s",
                    dict.chain(),
                    paths.join(", "),
                    l.seconds
                );
                self.slots.write().unwrap().background = Some(Arc::new(dict));
                l.state = LoadState::Loaded;
                self.metrics.load("loaded");
            }
            Err(msg) => {
                eprintln!("cube-server: load of version {version} failed: {msg}");
                l.state = LoadState::Failed(msg);
                self.metrics.load("failed");
            }
        }
    }

    /// Map and check every file of `paths`, each on top of the one before (the first on
    /// `parent` if it is a delta); the result must be `version`.
    fn open_chain(
        &self,
        version: u64,
        paths: &[String],
        parent: Option<Arc<Dict>>,
    ) -> Result<Dict, String> {
        let mut dict: Option<Dict> = None;
        for path in paths {
            let file = self.check(ShardFile::open(path)?)?;
            dict = Some(match (&dict, &parent, file.parent) {
                (None, None, _) => Dict::base(file)?,
                (None, Some(p), _) => p.apply(file)?,
                (Some(below), _, _) => below.apply(file)?,
            });
        }
        let dict = dict.ok_or("no shard file to load")?;
        if dict.version != version {
            return Err(format!(
                "{}: holds version {}, asked to load version {version}",
                paths.last().map_or("", String::as_str),
                dict.version
            ));
        }
        Ok(dict)
    }

    fn check(&self, d: ShardFile) -> Result<ShardFile, String> {
        let c = &self.config;
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
                    held_text(&slots)
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
        let (m, now) = (&self.metrics, self.clock());
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
            "requests": m.seeks(),
            "keys": m.keys.get(),
            "missing_keys": m.missing.get(),
            "errors": m.errors.get(),
            "connections": self.conns.count(),
            "idle_closed": self.conns.evicted.load(Relaxed),
        })
        .to_string()
    }
}

impl State {
    /// `GET /metrics`: the exposition, its gauges read from the versions held now.
    pub fn metrics_text(&self) -> String {
        let snapshot = {
            let slots = self.slots.read().unwrap();
            let held = |d: &Option<Arc<Dict>>| {
                d.as_deref().map_or_else(Held::default, |d| Held {
                    version: Some(d.version),
                    keys: d.layers.iter().map(|l| l.key_count).sum(),
                    bytes: d.layers.iter().map(|l| l.file_bytes).sum(),
                })
            };
            Snapshot {
                slots: [held(&slots.current), held(&slots.background)],
                ready: slots.current.is_some() && !self.stopping.load(SeqCst),
                connections: self.conns.count(),
            }
        };
        self.metrics.render(&snapshot)
    }
}

fn held_text(slots: &Slots) -> String {
    let v = |d: &Option<Arc<Dict>>| {
        d.as_ref()
            .map_or("none".to_string(), |d| d.version.to_string())
    };
    format!(
        "current {}, background {}",
        v(&slots.current),
        v(&slots.background)
    )
}

/// A held version; `idle_seconds`: since a seek last read it (null: never read);
/// `chain`: the versions of its files, base first; `keys` and `path`: its base's,
/// `delta_keys`: the keys (upserts and deletions) of its deltas; `bytes`: all its files.
fn dict_json(d: &Dict, now: u64) -> Value {
    let read = d.last_read.load(Relaxed);
    let base = &d.layers[0];
    json!({
        "version": d.version,
        "chain": d.chain(),
        "keys": base.key_count,
        "delta_keys": d.layers[1..].iter().map(|l| l.key_count).sum::<u64>(),
        "dim": d.dim,
        "bytes": d.layers.iter().map(|l| l.file_bytes).sum::<u64>(),
        "path": d.layers.last().map_or(base.path.as_str(), |l| l.path.as_str()),
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
    let path = l.paths.last().map_or("", String::as_str);
    json!({"version": l.version, "path": path, "paths": l.paths, "state": state, "error": error, "seconds": l.seconds})
}
