//! libFuzzer entry point of the `jws` target (fuzz/targets/jws.rs).
#![no_main]

#[path = "../targets/mod.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    targets::jws::run(data);
});
