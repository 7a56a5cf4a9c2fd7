//! libFuzzer entry point of the `uri` target (fuzz/targets/uri.rs).
#![no_main]

#[path = "../targets/mod.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    targets::uri::run(data);
});
