//! Links libtorch so that CUDA is found at run time when the machine has it, and compiles the
//! c10d shim (`shim/c10d.cpp`, PyTorch's distributed engine for `parallel ddp`) and the
//! optimizer shim (`shim/optim.cpp`, ATen's fused optimizer kernels).
//!
//! torch-sys links `torch_cuda` "as needed"; no Rust code references a symbol in it, so the
//! linker would drop it and CUDA would silently report as unavailable. We force it into
//! `kiln-runtime` (the binary that runs experiments) and give it an rpath to the libtorch it was
//! built against. The `kiln` binary never references libtorch, so it does not load it.

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    if let Ok(lib) = std::env::var("DEP_TCH_LIBTORCH_LIB") {
        shim(std::path::Path::new(&lib));
        optim_shim(std::path::Path::new(&lib));
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

/// Compiles the c10d shim (and over it the fsdp units, `shim/unit.cpp`, and tensor parallel's
/// collectives, `shim/tensor.cpp`) against libtorch's
/// headers and Gloo's (from Debian's `libgloo-dev`, unpacked into `.gloo/` by
/// `scripts/setup.sh`; the wheel ships none). The shim only calls
/// functions libtorch exports and instantiates no Gloo type, so the packaged headers need not
/// match libtorch's Gloo revision exactly; `tests/c10d.rs` guards that. With a CUDA libtorch and
/// NCCL's headers (from the wheel's `nvidia-nccl` and two header packages setup installs into
/// `.cuda-headers/`), the shim also builds ProcessGroupNCCL.
fn shim(lib: &std::path::Path) {
    use std::path::PathBuf;
    println!("cargo:rerun-if-changed=shim/c10d.cpp");
    println!("cargo:rerun-if-changed=shim/c10d.h");
    println!("cargo:rerun-if-changed=shim/unit.cpp");
    println!("cargo:rerun-if-changed=shim/tensor.cpp");
    println!("cargo:rerun-if-env-changed=KILN_GLOO_INCLUDE");
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let gloo = std::env::var_os("KILN_GLOO_INCLUDE")
        .map_or_else(|| root.join(".gloo/usr/include"), PathBuf::from);
    if !gloo.join("gloo/config.h").exists() {
        panic!(
            "Gloo's headers are missing from {}: run `bash scripts/setup.sh` (it unpacks Debian's libgloo-dev there)",
            gloo.display()
        );
    }
    let torch = lib.join("..");
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .std("c++17")
        .opt_level(2)
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        .define("USE_C10D_GLOO", None)
        .include(torch.join("include"))
        .include(torch.join("include/torch/csrc/api/include"))
        .include(&gloo)
        .flag_if_supported("-Wno-unused-parameter")
        .flag_if_supported("-Wno-interference-size")
        .file("shim/c10d.cpp")
        .file("shim/unit.cpp")
        .file("shim/tensor.cpp");
    let site = torch.join("..");
    let headers = root.join(".cuda-headers/nvidia/cu13/include");
    let nccl = [
        site.join("nvidia/nccl/include"),
        site.join("nvidia/cu13/include"),
        headers.clone(),
    ];
    let cuda = lib.join("libtorch_cuda.so").exists()
        && nccl[0].join("nccl.h").exists()
        && headers.join("crt/host_config.h").exists();
    if cuda {
        build
            .define("USE_C10D_NCCL", None)
            .define("KILN_NCCL", None);
        for dir in &nccl {
            build.include(dir);
        }
        println!("cargo:rustc-link-lib=dylib=c10_cuda");
    }
    build.compile("kiln_c10d");
}

/// Compiles the ATen shims against libtorch's headers: `_fused_adam_`, `_fused_adamw_` and
/// `_fused_sgd_` (`shim/optim.cpp`), which have CPU and CUDA kernels and which tch does not
/// generate, and a CUDA device's memory (`shim/cuda.cpp`: its total, the caching allocator's
/// peak), compiled with a CUDA libtorch and CUDA's headers (the wheel's `nvidia/cu13/include` and
/// the packages setup installs into `.cuda-headers/`), and activation checkpointing's autograd
/// function (`shim/recompute.cpp`).
fn optim_shim(lib: &std::path::Path) {
    println!("cargo:rerun-if-changed=shim/optim.cpp");
    println!("cargo:rerun-if-changed=shim/cuda.cpp");
    println!("cargo:rerun-if-changed=shim/recompute.cpp");
    println!("cargo:rerun-if-changed=shim/host.cpp");
    println!("cargo:rerun-if-changed=shim/guarded.h");
    let torch = lib.join("..");
    let root = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let runtime = torch.join("../nvidia/cu13/include");
    let crt = root.join(".cuda-headers/nvidia/cu13/include");
    let mut build = cc::Build::new();
    if lib.join("libtorch_cuda.so").exists()
        && runtime.join("cuda_runtime_api.h").exists()
        && crt.join("crt/host_config.h").exists()
    {
        build
            .define("KILN_CUDA", None)
            .include(runtime)
            .include(crt);
        println!("cargo:rustc-link-lib=dylib=c10_cuda");
    }
    build
        .cpp(true)
        .std("c++17")
        .opt_level(2)
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        .include(torch.join("include"))
        .include(torch.join("include/torch/csrc/api/include"))
        .flag_if_supported("-Wno-unused-parameter")
        .file("shim/optim.cpp")
        .file("shim/cuda.cpp")
        .file("shim/recompute.cpp")
        .file("shim/host.cpp")
        .compile("kiln_optim");
}
