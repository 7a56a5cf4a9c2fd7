//! libFuzzer entry point of the `registry` target (fuzz/targets/registry.rs).
#![no_main]

#[path = "../targets/mod.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    targets::registry::run(data);
});
