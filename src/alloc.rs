//! The allocator's one control weir uses: giving freed memory back to the kernel now.

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
