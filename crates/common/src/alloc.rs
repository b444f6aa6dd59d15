//! The allocator's controls weir uses: giving freed memory back to the kernel now, or from now on at once.

/// Returns memory the allocator holds freed to the kernel at once, instead
/// of after its purge delay (see `PURGE_DELAY_MS` in main.rs): after a
/// spill has dropped a table the size of the memory budget, so that the
/// budget holds for the resident set too, and before a benchmark measures a
/// peak.
pub fn give_back_freed_memory() {
    // SAFETY: mimalloc's collect takes no pointers; it only returns unused
    // memory of its own heaps (none when mimalloc is not the allocator).
    #[expect(unsafe_code, reason = "mimalloc's collect has only a C API")]
    unsafe {
        libmimalloc_sys::mi_collect(true)
    };
}

/// mimalloc's `mi_option_purge_delay` (option 15 in both its v2 and v3
/// headers; see `PURGE_DELAY_MS` in main.rs).
pub const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// From now on, memory freed by any thread goes back to the kernel at once
/// (a purge delay of 0), unless `MIMALLOC_PURGE_DELAY` says otherwise: the
/// spilling backend's store frees memory on threads of its own, where
/// [`give_back_freed_memory`] does not reach, and its budget is meant to
/// hold for the resident set.
pub fn return_freed_memory_at_once() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    // SAFETY: sets a plain integer option of the allocator, by value;
    // mimalloc documents options as settable at any time.
    #[expect(unsafe_code, reason = "mimalloc's options have only a C API")]
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0)
    };
}
