//! The process-wide memory cache: one executable per client and content
//! key, shared by every caller that asks for it. Unbounded; front ends
//! clear it ([`clear_memory_cache`]). Entries keep their client alive, so a
//! client's address cannot be reused while an entry names it.
//!
//! Lock rule: nothing logs, and nothing that may log on drop is dropped,
//! while the lock is held.

use crate::Compiled;
use pjrt_client::Client;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// Per client (its address), the executables by content key: a lookup
/// borrows the caller's key, so a hit copies no module text.
type Map = HashMap<u64, HashMap<Vec<u8>, Arc<Compiled>>>;
type Cache = Mutex<Map>;

fn cache() -> &'static Cache {
    static C: OnceLock<Cache> = OnceLock::new();
    C.get_or_init(|| Mutex::new(HashMap::new()))
}

fn lock() -> MutexGuard<'static, Map> {
    cache().lock().unwrap_or_else(|e| e.into_inner())
}

fn client_key(client: &Client) -> u64 {
    client.raw() as usize as u64
}

pub(crate) fn get(client: &Client, content: &[u8]) -> Option<Arc<Compiled>> {
    // The guard is a temporary of this statement: released before the
    // caller logs.
    lock()
        .get(&client_key(client))
        .and_then(|m| m.get(content))
        .cloned()
}

pub(crate) fn insert(client: &Client, content: Vec<u8>, compiled: Compiled) -> Arc<Compiled> {
    let (entry, duplicate) = {
        let mut c = lock();
        let m = c.entry(client_key(client)).or_default();
        match m.get(&content) {
            Some(first) => (first.clone(), Some(compiled)),
            None => {
                let e = Arc::new(compiled);
                m.insert(content, e.clone());
                (e, None)
            }
        }
    };
    drop(duplicate);
    entry
}

pub fn clear_memory_cache() -> usize {
    // Taken out under the lock, dropped after it.
    let old = std::mem::take(&mut *lock());
    let n = old.values().map(HashMap::len).sum();
    drop(old);
    n
}

/// In a forked child: forgets every cached executable without destroying
/// it (they belong to a client inherited from the parent, which must never
/// be touched in the child).
pub fn forget_memory_cache_for_fork() {
    std::mem::forget(std::mem::take(&mut *lock()));
}
