//! `kiln run` of a distributed experiment started without a launcher: like torchrun's
//! `--standalone`, it picks a free port on the loopback address and starts `world_size` ranks of
//! `kiln-runtime` on this machine with the variables torchrun sets (`MASTER_ADDR`,
//! `MASTER_PORT`, `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`), splitting the cores
//! between them. Every listener of the run is on the loopback address: the store (it listens on
//! `MASTER_ADDR` alone), Gloo's pairs (the ranks see the store is local) and NCCL's sockets
//! (`NCCL_SOCKET_IFNAME=lo`). Rank 0 writes to this process's terminal (its progress bar, its summary); the
//! lines of the other ranks are prefixed with `[rank K]`. When a rank fails, the others get a
//! few seconds to report what they saw, then any still running are killed; the launcher exits
//! non-zero, naming the rank that failed first when a signal ended it or ranks had to be killed
//! (when every rank ended on its own, their diagnostics say it all). No rank outlives the
//! launcher.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::cancel::Cancel;
use super::dist::rank::free_port;
use kiln::diagnostic::problem::Running;
use kiln::diagnostic::render::{to_text, Style};
use kiln::diagnostic::Problem;
use kiln::span::{Sources, Span};
use kiln::supervise::{signal_children, signal_name, spawn, Exit};

/// How long the other ranks may take to report after one failed, before they are killed.
const GRACE: Duration = Duration::from_secs(5);

/// Starts `world` local ranks running this process's own command line and waits for them;
/// `threads` is its `--threads` (when not given, the cores are split between the ranks) and
/// `quiet` its `--quiet`. Returns the exit status.
pub fn main(
    threads: Option<usize>,
    quiet: bool,
    world: usize,
    span: Span,
    sources: &Sources,
    style: Style,
    cancel: &Cancel,
) -> i32 {
    let say = |text: &str| {
        let _ = write!(std::io::stderr(), "{text}");
    };
    let port = match free_port() {
        Ok(p) => p,
        Err(e) => {
            say(&format!(
                "error: no free port on 127.0.0.1 for the ranks' store: {e}\n"
            ));
            return 2;
        }
    };
    let Ok(exe) = std::env::current_exe() else {
        say("error: cannot locate kiln-runtime to start the ranks\n");
        return 2;
    };
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if threads.is_none() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        args.push("--threads".into());
        args.push((cores / world).max(1).to_string().into());
    }
    if !quiet {
        say(&format!(
            "starting {world} ranks on this machine (store at 127.0.0.1:{port})\n"
        ));
    }
    let (tx, rx) = mpsc::channel::<(usize, std::io::Result<Exit>)>();
    let mut echoes = Vec::new();
    let mut started = 0;
    for r in 0..world {
        let mut cmd = Command::new(&exe);
        cmd.args(&args)
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", port.to_string())
            .env("RANK", r.to_string())
            .env("WORLD_SIZE", world.to_string())
            .env("LOCAL_RANK", r.to_string())
            .env("LOCAL_WORLD_SIZE", world.to_string())
            // NCCL's bootstrap and proxy sockets listen on the interface this names; left to
            // itself, NCCL picks the machine's first network interface.
            .env("NCCL_SOCKET_IFNAME", "lo")
            .env_remove("TORCHELASTIC_USE_AGENT_STORE");
        // c10d logs a lost connection as a warning with a C++ stack trace; the ranks report it
        // as a diagnostic, so only c10d's errors are shown, unless the user chose otherwise.
        if std::env::var_os("TORCH_CPP_LOG_LEVEL").is_none() {
            cmd.env("TORCH_CPP_LOG_LEVEL", "ERROR");
        }
        if r > 0 {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
        let mut child = match spawn(&mut cmd) {
            Ok(c) => c,
            Err(e) => {
                say(&format!("error: cannot start rank {r}: {e}\n"));
                signal_children(libc::SIGKILL);
                break;
            }
        };
        started += 1;
        if let Some(out) = child.take_stdout() {
            echoes.push(std::thread::spawn(move || echo(out, r, false)));
        }
        if let Some(err) = child.take_stderr() {
            echoes.push(std::thread::spawn(move || echo(err, r, true)));
        }
        let tx = tx.clone();
        std::thread::spawn(move || {
            let _ = tx.send((r, child.wait()));
        });
    }
    drop(tx);
    let mut first: Option<(usize, String)> =
        (started < world).then(|| (started, "could not start".into()));
    let mut deadline = first.as_ref().map(|_| Instant::now() + GRACE);
    let mut left = started;
    // Whether a rank ended abnormally (a signal, or killed here after the grace period): then
    // the ranks' own diagnostics do not tell the whole story, and the launcher says which.
    let mut abnormal = started < world;
    while left > 0 {
        let next = match deadline {
            None => rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
            Some(d) => rx.recv_timeout(d.saturating_duration_since(Instant::now())),
        };
        match next {
            Ok((r, exit)) => {
                left -= 1;
                let how = match exit {
                    Ok(Exit { code: Some(0), .. }) => continue,
                    Ok(Exit {
                        signal: Some(s), ..
                    }) => {
                        abnormal = true;
                        format!("killed by {}", signal_name(s))
                    }
                    Ok(Exit { code, .. }) => format!("exit status {}", code.unwrap_or(-1)),
                    Err(e) => format!("cannot be waited for: {e}"),
                };
                if first.is_none() {
                    first = Some((r, how));
                    deadline = Some(Instant::now() + GRACE);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                abnormal = true;
                signal_children(libc::SIGKILL);
                deadline = None;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    for e in echoes {
        let _ = e.join();
    }
    let Some((rank, how)) = first else {
        return 0;
    };
    if abnormal && !cancel.is_cancelled() {
        let d = Problem::Running(Running::RankFailed {
            span,
            rank: None,
            stopped: Some(rank),
            detail: format!("{how}; the other ranks were stopped"),
        })
        .diagnostic();
        say(&to_text(&d, sources, style));
    }
    1
}

/// Copies a rank's output to this process's, each line prefixed with `[rank K]`.
fn echo(from: impl Read, rank: usize, to_stderr: bool) {
    for line in BufReader::new(from).lines() {
        let Ok(line) = line else { break };
        let text = format!("[rank {rank}] {line}\n");
        let _ = if to_stderr {
            std::io::stderr().write_all(text.as_bytes())
        } else {
            std::io::stdout().write_all(text.as_bytes())
        };
    }
}
