//! The process-wide memory cache: one executable per client and content
//! key, shared by every caller that asks for it.
//!
//! Bounded by what is in use. Every compiled program holds memory mappings
//! of its generated code (XLA:CPU: a few per kernel), and a Linux process
//! has at most `vm.max_map_count` of them (65,530 by default): a cache that
//! kept every program ever compiled made a long-running process fail to
//! compile, then crash, after some ten thousand programs. So:
//!
//! - the index holds *weak* references: a program that some caller still
//!   holds (a compiled function, a `call_jax` entry, a served model) is
//!   handed to every other caller asking for the same content, and is
//!   freed when the last holder drops it;
//! - besides, the most recently compiled or fetched programs are kept
//!   alive (`HLOBRIDGE_MEMORY_CACHE_ENTRIES`, default 32), so a function
//!   defined again with the same body soon after does not compile again.
//!
//! Programs evicted from both come back from the disk cache when it is on.
//! Entries keep their client alive, so a client's address cannot be reused
//! while a live entry names it; a dead entry never answers.
//!
//! Lock rule: nothing logs, and nothing that may log on drop is dropped,
//! while the lock is held (evicted programs are dropped after it).

use crate::Compiled;
use pjrt_client::Client;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

/// Default of `HLOBRIDGE_MEMORY_CACHE_ENTRIES`.
const DEFAULT_RETAINED: usize = 32;

/// The cache's state under its one lock.
#[derive(Default)]
struct State {
    /// Per client (its address), the executables by content key: a lookup
    /// borrows the caller's key, so a hit copies no module text.
    index: HashMap<u64, HashMap<Vec<u8>, Weak<Compiled>>>,
    /// Index size after the last sweep of dead entries: the next sweep runs
    /// when it has doubled (amortized O(1) per insert).
    swept_at: usize,
    /// The most recently used programs, oldest first, kept alive.
    recent: VecDeque<Arc<Compiled>>,
}

impl State {
    fn len(&self) -> usize {
        self.index.values().map(HashMap::len).sum()
    }

    /// Indexed programs still alive (held by the cache or a caller).
    fn live(&self) -> usize {
        self.index
            .values()
            .flat_map(HashMap::values)
            .filter(|w| w.strong_count() > 0)
            .count()
    }

    /// Moves `e` to the back of `recent` (pushing it if absent); returns the
    /// programs pushed out past `cap`, to be dropped after the lock.
    fn touch(&mut self, e: &Arc<Compiled>, cap: usize) -> Vec<Arc<Compiled>> {
        if let Some(i) = self.recent.iter().position(|r| Arc::ptr_eq(r, e)) {
            let r = self.recent.remove(i).expect("position is in range");
            self.recent.push_back(r);
        } else if cap > 0 {
            self.recent.push_back(e.clone());
        }
        let excess = self.recent.len().saturating_sub(cap);
        self.recent.drain(..excess).collect()
    }

    /// The live program indexed under `client` and `content`, if any.
    fn lookup(&self, client: u64, content: &[u8]) -> Option<Arc<Compiled>> {
        self.index
            .get(&client)
            .and_then(|m| m.get(content))
            .and_then(Weak::upgrade)
    }

    /// Drops index entries whose program has been freed.
    fn sweep(&mut self) {
        for m in self.index.values_mut() {
            m.retain(|_, w| w.strong_count() > 0);
        }
        self.index.retain(|_, m| !m.is_empty());
        self.swept_at = self.len();
    }
}

fn cache() -> &'static Mutex<State> {
    static C: OnceLock<Mutex<State>> = OnceLock::new();
    C.get_or_init(|| Mutex::new(State::default()))
}

fn lock() -> MutexGuard<'static, State> {
    cache().lock().unwrap_or_else(|e| e.into_inner())
}

/// How many recently used programs are kept alive: the
/// `HLOBRIDGE_MEMORY_CACHE_ENTRIES` setting, read once per process.
pub fn retained_capacity() -> usize {
    static CAP: OnceLock<usize> = OnceLock::new();
    *CAP.get_or_init(|| {
        use hlobridge_config::Var;
        match hlobridge_config::parse::<usize>(Var::MemoryCacheEntries) {
            Ok(v) => v.unwrap_or(DEFAULT_RETAINED),
            Err(e) => {
                tracing::warn!(value = %e.value, "HLOBRIDGE_MEMORY_CACHE_ENTRIES is not a count; using {DEFAULT_RETAINED}");
                DEFAULT_RETAINED
            }
        }
    })
}

fn client_key(client: &Client) -> u64 {
    client.raw() as usize as u64
}

pub(crate) fn get(client: &Client, content: &[u8]) -> Option<Arc<Compiled>> {
    let (hit, evicted) = {
        let mut s = lock();
        let hit = s.lookup(client_key(client), content)?;
        let evicted = s.touch(&hit, retained_capacity());
        (hit, evicted)
    };
    drop(evicted);
    Some(hit)
}

pub(crate) fn insert(client: &Client, content: Vec<u8>, compiled: Compiled) -> Arc<Compiled> {
    let client = client_key(client);
    let (entry, duplicate, evicted) = {
        let mut s = lock();
        let (entry, duplicate) = match s.lookup(client, &content) {
            // Compiled twice concurrently: every caller gets the first.
            Some(first) => (first, Some(compiled)),
            None => {
                let e = Arc::new(compiled);
                s.index
                    .entry(client)
                    .or_default()
                    .insert(content, Arc::downgrade(&e));
                (e, None)
            }
        };
        let evicted = s.touch(&entry, retained_capacity());
        if s.len() > 2 * s.swept_at.max(16) {
            s.sweep();
        }
        (entry, duplicate, evicted)
    };
    drop(duplicate);
    drop(evicted);
    entry
}

/// Drops the cache's own references (the recently used programs it keeps
/// alive) and its index; programs callers still hold live on. Returns how
/// many indexed programs were still alive.
pub fn clear_memory_cache() -> usize {
    // Taken out under the lock, dropped after it.
    let old = std::mem::take(&mut *lock());
    let n = old.live();
    drop(old);
    n
}

/// In a forked child: forgets every cached executable without destroying
/// it (they belong to a client inherited from the parent, which must never
/// be touched in the child).
pub fn forget_memory_cache_for_fork() {
    std::mem::forget(std::mem::take(&mut *lock()));
}

/// Programs the index can still answer with (alive somewhere), and how many
/// of them the cache itself keeps alive.
pub fn memory_cache_sizes() -> (usize, usize) {
    let s = lock();
    (s.live(), s.recent.len())
}
