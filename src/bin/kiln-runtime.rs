//! `kiln-runtime`: the part of Kiln that loads libtorch. `kiln` starts it for the commands that
//! need libtorch, passing its arguments through.

use std::io::Write;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args.first().map(String::as_str) {
        Some("env") => env(),
        _ => {
            let _ = writeln!(
                std::io::stderr(),
                "kiln-runtime is started by `kiln`; run `kiln --help`"
            );
            2
        }
    };
    std::process::exit(code);
}

/// Prints the libtorch version and the devices it sees.
fn env() -> i32 {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "kiln       {}", env!("CARGO_PKG_VERSION"));
    let _ = writeln!(out, "libtorch   {}", env!("KILN_LIBTORCH_VERSION"));
    let _ = writeln!(out, "threads    {}", tch::get_num_threads());
    let cuda = tch::Cuda::is_available();
    let _ = writeln!(
        out,
        "cuda       {}",
        if cuda { "available" } else { "not available" }
    );
    if cuda {
        let _ = writeln!(out, "devices    {}", tch::Cuda::device_count());
        let _ = writeln!(out, "cudnn      {}", tch::Cuda::cudnn_is_available());
    }
    0
}
