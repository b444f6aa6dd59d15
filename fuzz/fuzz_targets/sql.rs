//! Fuzz target: parse, bind and plan arbitrary SQL text (`weir::fuzz::sql`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = weir::fuzz::sql(text);
    }
});
