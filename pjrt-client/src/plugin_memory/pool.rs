//! The cache of large blocks behind the plugin's redirected allocator.
//!
//! Requests of at least [`MIN_BYTES`] (with an alignment of at most
//! [`GRANULE`]) are served from blocks this module maps itself, rounded up
//! to [`GRANULE`], 2 MiB aligned and advised as transparent huge pages. A
//! freed block is kept (up to the cache's byte cap) and handed to the next
//! request of its size class: the smallest cached block that holds the
//! request with at most an eighth to spare. Everything smaller, and every
//! pointer the cache did not hand out, goes to libc unchanged.
//!
//! The state is behind one `pthread_mutex_t`, taken by `pthread_atfork`'s
//! prepare handler and released in parent and child, so a child forked
//! while another thread was inside the cache does not inherit a held lock.

use std::cell::UnsafeCell;
use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// The smallest request the cache serves (smaller ones are glibc's, which
/// keeps them in its arenas).
pub(crate) const MIN_BYTES: usize = 8 << 20;
/// Block size granule and alignment: one x86-64 huge page.
pub(crate) const GRANULE: usize = 2 << 20;

#[derive(Default)]
struct State {
    /// Block address -> mapped length, for blocks handed out.
    live: HashMap<usize, usize>,
    /// Mapped length -> addresses of cached blocks of that length.
    free: BTreeMap<usize, Vec<usize>>,
    cached: usize,
}

struct Locked {
    mutex: UnsafeCell<libc::pthread_mutex_t>,
    state: UnsafeCell<Option<State>>,
}

// SAFETY: `state` is only touched with `mutex` held (`with_state`).
unsafe impl Sync for Locked {}

static POOL: Locked = Locked {
    mutex: UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER),
    state: UnsafeCell::new(None),
};

/// Byte cap of the cached (freed, kept) blocks.
pub(crate) static CAP: AtomicUsize = AtomicUsize::new(0);
static REUSED: AtomicU64 = AtomicU64::new(0);
static MAPPED: AtomicU64 = AtomicU64::new(0);
static UNMAPPED: AtomicU64 = AtomicU64::new(0);
static CACHED_BYTES: AtomicUsize = AtomicUsize::new(0);
static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);

/// Counters of the cache since the process started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Requests served from a cached block (no new pages, no page faults).
    pub reused: u64,
    /// Blocks mapped from the OS.
    pub mapped: u64,
    /// Blocks returned to the OS (freed while the cache was full).
    pub unmapped: u64,
    /// Bytes in cached blocks now.
    pub cached_bytes: usize,
    /// Bytes in blocks handed out now.
    pub live_bytes: usize,
}

pub(crate) fn stats() -> PoolStats {
    PoolStats {
        reused: REUSED.load(Ordering::Relaxed),
        mapped: MAPPED.load(Ordering::Relaxed),
        unmapped: UNMAPPED.load(Ordering::Relaxed),
        cached_bytes: CACHED_BYTES.load(Ordering::Relaxed),
        live_bytes: LIVE_BYTES.load(Ordering::Relaxed),
    }
}

fn with_state<R>(f: impl FnOnce(&mut State) -> R) -> R {
    // SAFETY: the mutex is a valid, initialised pthread mutex for the
    // process's lifetime; the state is only touched while it is held.
    unsafe {
        libc::pthread_mutex_lock(POOL.mutex.get());
        let r = f((*POOL.state.get()).get_or_insert_with(State::default));
        libc::pthread_mutex_unlock(POOL.mutex.get());
        r
    }
}

extern "C" fn before_fork() {
    // SAFETY: see `with_state`; released by the two handlers below.
    unsafe { libc::pthread_mutex_lock(POOL.mutex.get()) };
}

extern "C" fn after_fork() {
    // SAFETY: the forking thread took the lock in `before_fork`; in the
    // child that thread is the only one, and owns it too.
    unsafe { libc::pthread_mutex_unlock(POOL.mutex.get()) };
}

/// Registers the fork handlers (once, by `super::install`).
pub(crate) fn register_fork_handlers() -> bool {
    // SAFETY: registering plain `extern "C"` functions without captures.
    unsafe { libc::pthread_atfork(Some(before_fork), Some(after_fork), Some(after_fork)) == 0 }
}

fn map(len: usize) -> Option<usize> {
    let span = len + GRANULE;
    // SAFETY: an anonymous private mapping, owned by this module from here.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            span,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    let start = p as usize;
    let aligned = (start + GRANULE - 1) & !(GRANULE - 1);
    // SAFETY: unmapping the unaligned head and tail of our own mapping
    // (either may be empty), then advising the block we keep.
    unsafe {
        if aligned > start {
            libc::munmap(p, aligned - start);
        }
        let tail = start + span - (aligned + len);
        if tail > 0 {
            libc::munmap((aligned + len) as *mut c_void, tail);
        }
        libc::madvise(aligned as *mut c_void, len, libc::MADV_HUGEPAGE);
    }
    MAPPED.fetch_add(1, Ordering::Relaxed);
    Some(aligned)
}

fn unmap(addr: usize, len: usize) {
    // SAFETY: `addr..addr + len` is a block `map` made and nobody holds.
    unsafe { libc::munmap(addr as *mut c_void, len) };
    UNMAPPED.fetch_add(1, Ordering::Relaxed);
}

/// A block of at least `size` bytes aligned to `align`, or `None` when the
/// request is not the cache's (small, over-aligned) or mapping failed.
pub(crate) fn alloc(size: usize, align: usize) -> Option<*mut c_void> {
    if size < MIN_BYTES || align > GRANULE || !align.is_power_of_two() {
        return None;
    }
    let len = size.checked_add(GRANULE - 1)? & !(GRANULE - 1);
    let reused = with_state(|st| {
        let (&have, _) = st.free.range(len..=len + len / 8).next()?;
        let list = st.free.get_mut(&have)?;
        let addr = list.pop()?;
        if list.is_empty() {
            st.free.remove(&have);
        }
        st.cached -= have;
        st.live.insert(addr, have);
        CACHED_BYTES.store(st.cached, Ordering::Relaxed);
        Some((addr, have))
    });
    let (addr, got) = match reused {
        Some(b) => {
            REUSED.fetch_add(1, Ordering::Relaxed);
            b
        }
        None => {
            let addr = map(len)?;
            with_state(|st| st.live.insert(addr, len));
            (addr, len)
        }
    };
    LIVE_BYTES.fetch_add(got, Ordering::Relaxed);
    Some(addr as *mut c_void)
}

/// The mapped length of `p` if the cache handed it out.
pub(crate) fn owned_len(p: *mut c_void) -> Option<usize> {
    with_state(|st| st.live.get(&(p as usize)).copied())
}

/// Takes `p` back if the cache handed it out (cached, or unmapped when the
/// cache is full); `false` for any other pointer.
pub(crate) fn release(p: *mut c_void) -> bool {
    let cap = CAP.load(Ordering::Relaxed);
    let outcome = with_state(|st| {
        let len = st.live.remove(&(p as usize))?;
        LIVE_BYTES.fetch_sub(len, Ordering::Relaxed);
        if st.cached + len <= cap {
            st.free.entry(len).or_default().push(p as usize);
            st.cached += len;
            CACHED_BYTES.store(st.cached, Ordering::Relaxed);
            Some(None)
        } else {
            Some(Some(len))
        }
    });
    match outcome {
        None => false,
        Some(None) => true,
        Some(Some(len)) => {
            unmap(p as usize, len);
            true
        }
    }
}

/// Returns every cached block to the OS; the bytes released.
pub(crate) fn trim() -> usize {
    let blocks: Vec<(usize, usize)> = with_state(|st| {
        let out = std::mem::take(&mut st.free)
            .into_iter()
            .flat_map(|(len, v)| v.into_iter().map(move |a| (a, len)))
            .collect();
        st.cached = 0;
        CACHED_BYTES.store(0, Ordering::Relaxed);
        out
    });
    blocks
        .iter()
        .map(|&(a, len)| {
            unmap(a, len);
            len
        })
        .sum()
}

// -- the functions stored in the plugin's GOT ---------------------------------

pub(crate) unsafe extern "C" fn hook_malloc(size: usize) -> *mut c_void {
    match alloc(size, 16) {
        Some(p) => p,
        // SAFETY: libc's malloc, as the plugin would have called it.
        None => unsafe { libc::malloc(size) },
    }
}

pub(crate) unsafe extern "C" fn hook_posix_memalign(
    out: *mut *mut c_void,
    align: usize,
    size: usize,
) -> c_int {
    let valid = align.is_power_of_two() && align.is_multiple_of(std::mem::size_of::<usize>());
    match if valid { alloc(size, align) } else { None } {
        Some(p) => {
            // SAFETY: `out` is the caller's result slot, as for libc.
            unsafe { *out = p };
            0
        }
        // SAFETY: libc's posix_memalign with the caller's arguments.
        None => unsafe { libc::posix_memalign(out, align, size) },
    }
}

pub(crate) unsafe extern "C" fn hook_aligned_alloc(align: usize, size: usize) -> *mut c_void {
    match alloc(size, align) {
        Some(p) => p,
        // SAFETY: libc's aligned_alloc with the caller's arguments.
        None => unsafe { libc::aligned_alloc(align, size) },
    }
}

pub(crate) unsafe extern "C" fn hook_free(p: *mut c_void) {
    if p.is_null() || release(p) {
        return;
    }
    // SAFETY: not the cache's pointer: libc's, freed as the plugin would.
    unsafe { libc::free(p) }
}

pub(crate) unsafe extern "C" fn hook_realloc(p: *mut c_void, size: usize) -> *mut c_void {
    let Some(old) = (if p.is_null() { None } else { owned_len(p) }) else {
        if p.is_null() {
            // SAFETY: realloc(NULL, n) is malloc(n).
            return unsafe { hook_malloc(size) };
        }
        // SAFETY: libc's pointer, reallocated by libc.
        return unsafe { libc::realloc(p, size) };
    };
    // SAFETY: a new block of `size` bytes, from the cache or libc.
    let q = unsafe { hook_malloc(size) };
    if !q.is_null() {
        // SAFETY: `p` holds `old` mapped bytes and `q` at least `size`.
        unsafe { std::ptr::copy_nonoverlapping(p as *const u8, q as *mut u8, old.min(size)) };
        release(p);
    }
    q
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cache is process-wide: its tests take turns.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn serial() -> std::sync::MutexGuard<'static, ()> {
        SERIAL.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[test]
    fn small_and_over_aligned_requests_are_not_the_caches() {
        let _turn = serial();
        assert!(alloc(MIN_BYTES - 1, 64).is_none());
        assert!(alloc(MIN_BYTES, GRANULE * 2).is_none());
        assert!(alloc(MIN_BYTES, 48).is_none());
        let x = 7usize;
        assert!(!release(&x as *const usize as *mut c_void));
    }

    #[test]
    fn a_freed_block_is_reused_and_keeps_its_contents_writable() {
        let _turn = serial();
        CAP.store(1 << 30, Ordering::Relaxed);
        let n = MIN_BYTES + 12345;
        let p = alloc(n, 64).expect("a block");
        assert_eq!(p as usize % GRANULE, 0);
        // SAFETY: the block holds at least n bytes.
        unsafe { std::ptr::write_bytes(p as *mut u8, 0xab, n) };
        let before = stats().reused;
        assert!(release(p));
        let q = alloc(n - 1000, 64).expect("a block");
        assert_eq!(q, p, "the cached block of the same size class");
        assert!(stats().reused > before);
        // A much smaller request does not take a much larger block.
        let big = alloc(4 * MIN_BYTES, 64).unwrap();
        assert!(release(big));
        let small = alloc(MIN_BYTES, 64).unwrap();
        assert_ne!(small, big);
        for b in [q, small] {
            assert!(release(b));
        }
        assert!(trim() >= 4 * MIN_BYTES);
    }

    #[test]
    fn realloc_moves_a_cached_block_with_its_bytes() {
        let _turn = serial();
        CAP.store(1 << 30, Ordering::Relaxed);
        // SAFETY: the hooks behave as libc's allocation functions.
        unsafe {
            let p = hook_malloc(MIN_BYTES);
            assert!(owned_len(p).is_some());
            *(p as *mut u64) = 0x1234_5678;
            let q = hook_realloc(p, 3 * MIN_BYTES);
            assert_eq!(*(q as *mut u64), 0x1234_5678);
            let r = hook_realloc(q, 100); // back to libc's heap
            assert!(owned_len(r).is_none());
            assert_eq!(*(r as *mut u64), 0x1234_5678);
            hook_free(r);
            let mut out: *mut c_void = std::ptr::null_mut();
            assert_eq!(hook_posix_memalign(&mut out, 64, MIN_BYTES), 0);
            assert_eq!(out as usize % 64, 0);
            hook_free(out);
            assert_ne!(hook_posix_memalign(&mut out, 24, MIN_BYTES), 0);
        }
    }

    #[test]
    fn a_full_cache_returns_blocks_to_the_os() {
        let _turn = serial();
        // A cap of zero makes release unmap.
        let p = alloc(MIN_BYTES * 2, 64).unwrap();
        let unmapped = stats().unmapped;
        CAP.store(0, Ordering::Relaxed);
        assert!(release(p));
        CAP.store(1 << 30, Ordering::Relaxed);
        assert!(stats().unmapped > unmapped);
    }
}
