//! The `kiln` command line.

mod cli;

/// Parsing and checking a large file allocates and frees a great many small nodes; mimalloc
/// does that in a fraction of the system allocator's time (the editor's checks are the hot path).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(cli::main());
}
