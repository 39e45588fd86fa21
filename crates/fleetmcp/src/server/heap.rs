//! Memory given back after a burst: on glibc, blocks of [`LARGE`] bytes and more are always
//! mapped on their own and unmapped when freed.
//!
//! glibc raises its mapping threshold each time a mapped block is freed (up to 32 MiB), so
//! after one burst of large buffers (request bodies, answers, SSE history, a client that sends
//! the largest thing allowed) the next ones come from the heap's arenas, and freeing them keeps
//! the memory in the process for ever: 1.3 GB stayed after an attack ended. Setting the
//! threshold fixes it (and turns the raising off); what costs is a mapping per large block,
//! which the copying of that many bytes outweighs. Other allocators (a binary may choose
//! jemalloc or mimalloc) return memory on their own; this does nothing for them.

/// The size from which a block is mapped on its own.
const LARGE: usize = 256 * 1024;

/// Sets the threshold, once per process (any later call does nothing).
pub(super) fn return_large_blocks() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(set);
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set() {
    // SAFETY: `mallopt` only changes the allocator's parameters; glibc makes it thread-safe.
    let ok = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, LARGE as libc::c_int) };
    if ok != 1 {
        tracing::debug!("glibc refused M_MMAP_THRESHOLD; large blocks may stay after a burst");
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set() {}
