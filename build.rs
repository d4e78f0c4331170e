//! Links libtorch so that CUDA is found at run time when the machine has it.
//!
//! torch-sys links `torch_cuda` "as needed"; no Rust code references a symbol in it, so the
//! linker would drop it and CUDA would silently report as unavailable. We force it into
//! `kiln-runtime` (the binary that runs experiments) and give it an rpath to the libtorch it was
//! built against. The `kiln` binary never references libtorch, so it does not load it.

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    if let Ok(lib) = std::env::var("DEP_TCH_LIBTORCH_LIB") {
        println!("cargo:rustc-link-arg-bin=kiln-runtime=-Wl,-rpath,{lib}");
        // The examples (`examples/tch_bench.rs`, the hand-written baseline of bench/run.sh) find
        // libtorch the same way.
        println!("cargo:rustc-link-arg-examples=-Wl,-rpath,{lib}");
        let version = std::path::Path::new(&lib).join("../version.py");
        let text = std::fs::read_to_string(version).unwrap_or_default();
        let found = text
            .lines()
            .find_map(|l| l.strip_prefix("__version__ = "))
            .map(|v| v.trim_matches(['\'', '"']).to_string());
        println!(
            "cargo:rustc-env=KILN_LIBTORCH_VERSION={}",
            found.unwrap_or_else(|| "unknown".into())
        );
        let has_cuda = std::path::Path::new(&lib).join("libtorch_cuda.so").exists();
        if has_cuda {
            println!("cargo:rustc-link-arg-bin=kiln-runtime=-Wl,--no-as-needed");
            println!("cargo:rustc-link-arg-bin=kiln-runtime=-ltorch_cuda");
            println!("cargo:rustc-link-arg-bin=kiln-runtime=-Wl,--as-needed");
            println!("cargo:rustc-link-arg-examples=-Wl,--no-as-needed");
            println!("cargo:rustc-link-arg-examples=-ltorch_cuda");
            println!("cargo:rustc-link-arg-examples=-Wl,--as-needed");
        }
    }
}
