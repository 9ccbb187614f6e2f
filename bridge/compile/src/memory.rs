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

type Cache = Mutex<HashMap<Vec<u8>, Arc<Compiled>>>;

fn cache() -> &'static Cache {
    static C: OnceLock<Cache> = OnceLock::new();
    C.get_or_init(|| Mutex::new(HashMap::new()))
}

fn lock() -> MutexGuard<'static, HashMap<Vec<u8>, Arc<Compiled>>> {
    cache().lock().unwrap_or_else(|e| e.into_inner())
}

fn full_key(client: &Client, content: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + content.len());
    k.extend_from_slice(&(client.raw() as usize as u64).to_le_bytes());
    k.extend_from_slice(content);
    k
}

pub(crate) fn get(client: &Client, content: &[u8]) -> Option<Arc<Compiled>> {
    // The guard is a temporary of this statement: released before the
    // caller logs.
    lock().get(&full_key(client, content)).cloned()
}

/// Inserts `compiled` unless another thread inserted the same key first;
/// returns the entry every caller shares. The duplicate is dropped after
/// the lock is released (destroying an executable may log).
pub(crate) fn insert(client: &Client, content: Vec<u8>, compiled: Compiled) -> Arc<Compiled> {
    let key = full_key(client, &content);
    drop(content);
    let (entry, duplicate) = {
        let mut c = lock();
        match c.get(&key) {
            Some(first) => (first.clone(), Some(compiled)),
            None => {
                let e = Arc::new(compiled);
                c.insert(key, e.clone());
                (e, None)
            }
        }
    };
    drop(duplicate);
    entry
}

/// Drops every cached executable; returns how many there were. Executables
/// still held by callers stay valid.
pub fn clear_memory_cache() -> usize {
    // Taken out under the lock, dropped after it.
    let old = std::mem::take(&mut *lock());
    let n = old.len();
    drop(old);
    n
}

/// In a forked child: forgets every cached executable without destroying
/// it (they belong to a client inherited from the parent, which must never
/// be touched in the child).
pub fn forget_memory_cache_for_fork() {
    std::mem::forget(std::mem::take(&mut *lock()));
}
