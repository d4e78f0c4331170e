//! Distributed data parallel over processes (Gloo on loopback): after 20 steps the parameters of
//! 2 and 3 ranks, started by `kiln run` and by torchrun (or its variables set by hand), match a
//! single process on the full batch; a non-finite loss on one rank stops every rank at that step;
//! a rank killed mid-run, a rank that never arrives and a rank started from another experiment
//! end every rank with a diagnostic naming it, within the timeout, and leave no process behind;
//! a resume continues at the same world size and is refused at another; a local run listens on
//! loopback alone, and rank 0 serves the store on `MASTER_ADDR` alone.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use support::ranks::{finish, kill_a_rank, none_left, processes_with, run_to_end, runtime};
use support::{
    checkpoint_tensors, newest_checkpoint, root, s, scratch, text, within_one_sample, write,
};

/// A small experiment with the strategy `parallel`: 400 training samples in batches of 24, each
/// batch in two micro-batches (the epoch's last batch holds 16: 3 ranks take micro-batches of 3
/// and 3, 3 and 3, 3 and 1).
fn experiment(parallel: &str, lr: &str, steps: u64) -> String {
    format!(
        r#"
experiment "ddp" {{
  seed 5
  data {{
    source synthetic(inputs: normal([8]), targets: randint(3), count: 500)
    split(train: 0.8, val: 0.2)
    batch 24
  }}
  model {{
    input [8]
    fc1: linear(16)
    tanh
    fc2: linear(3)
  }}
  device cpu
  {parallel}
  optimizer sgd(lr: {lr}, momentum: 0.9)
  train {{
    steps {steps}
    accumulate 2
    loss cross_entropy
    metrics [accuracy]
    eval_every 10 steps
    checkpoint(every: 10 steps, keep: 1)
  }}
}}
"#
    )
}

/// One rank started by hand, as torchrun starts it.
fn rank(exp: &Path, run: &Path, r: usize, world: usize, port: u16) -> Child {
    let mut c = runtime(&[
        "run",
        s(exp),
        "--quiet",
        "--threads",
        "1",
        "--run-dir",
        s(run),
    ]);
    c.env("RANK", r.to_string())
        .env("WORLD_SIZE", world.to_string())
        .env("LOCAL_RANK", r.to_string())
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string());
    c.spawn().expect("start a rank")
}

/// A port free now on the loopback address.
fn port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// The parameters of the newest checkpoint of `run`, by name, as f32 values.
fn params(run: &Path) -> BTreeMap<String, Vec<f32>> {
    let (tensors, others) = checkpoint_tensors(run);
    let wide: Vec<&String> = others.iter().filter(|n| n.starts_with("param/")).collect();
    assert!(wide.is_empty(), "{wide:?} are not fp32");
    let out: BTreeMap<String, Vec<f32>> = tensors
        .into_iter()
        .filter(|(name, _)| name.starts_with("param/"))
        .collect();
    assert!(!out.is_empty(), "the checkpoint holds parameters");
    out
}

/// The largest difference between two runs' parameters.
fn max_difference(a: &Path, b: &Path) -> f32 {
    let (pa, pb) = (params(a), params(b));
    assert_eq!(pa.keys().collect::<Vec<_>>(), pb.keys().collect::<Vec<_>>());
    pa.iter()
        .flat_map(|(k, va)| va.iter().zip(&pb[k]).map(|(x, y)| (x - y).abs()))
        .fold(0.0, f32::max)
}

#[test]
fn ddp_matches_one_process_on_the_full_batch() {
    let dir = scratch("ddp-equivalence");
    let single = write(&dir, "single.exp", &experiment("", "0.1", 20));
    let two = write(
        &dir,
        "two.exp",
        &experiment("parallel ddp(backend: gloo, world_size: 2)", "0.1", 20),
    );
    let three = write(
        &dir,
        "three.exp",
        &experiment("parallel ddp(backend: gloo, world_size: 3)", "0.1", 20),
    );
    run_to_end(&single, &dir.join("single"));
    // `kiln run` starts the ranks itself.
    run_to_end(&two, &dir.join("two-kiln"));
    run_to_end(&three, &dir.join("three-kiln"));
    // torchrun's variables, set by hand: rank 0 serves the store.
    let p = port();
    let ranks: Vec<Child> = (0..2)
        .map(|r| rank(&two, &dir.join("two-vars"), r, 2, p))
        .collect();
    for (r, child) in ranks.into_iter().enumerate() {
        let (out, _) = finish(child, Duration::from_secs(120));
        assert!(out.status.success(), "rank {r} failed:\n{}", text(&out));
    }
    // torchrun itself: its agent serves the store, every rank is a client.
    let torchrun = root().join(".venv/bin/torchrun");
    let out = Command::new(&torchrun)
        .args(["--standalone", "--nproc-per-node", "3", "--no-python"])
        .arg(env!("CARGO_BIN_EXE_kiln-runtime"))
        .args(["run", s(&three), "--quiet", "--run-dir"])
        .arg(dir.join("three-torchrun"))
        .current_dir(root())
        .env("NO_COLOR", "1")
        .output()
        .expect("torchrun starts");
    assert!(out.status.success(), "torchrun failed:\n{}", text(&out));
    for run in ["two-kiln", "three-kiln", "two-vars", "three-torchrun"] {
        assert_eq!(newest_checkpoint(&dir.join(run)), Some(20), "{run}");
        let d = max_difference(&dir.join("single"), &dir.join(run));
        assert!(d < 1e-5, "{run}: the parameters differ by {d}");
    }
    // The reported losses are those of the global batch.
    let loss = |run: &str| {
        let r = support::report(&dir.join(run));
        r["train_loss"].as_f64().expect("train loss")
    };
    assert!((loss("single") - loss("three-kiln")).abs() < 1e-5);
    // Each rank evaluates its share of the validation split; the sums add up to one process's.
    let val = |run: &str| {
        let r = support::report(&dir.join(run));
        let v = &r["val"];
        (
            v["loss"].as_f64().expect("val loss"),
            v["accuracy"].as_f64().expect("val accuracy"),
        )
    };
    let ((l1, a1), (l3, a3)) = (val("single"), val("three-kiln"));
    assert!((l1 - l3).abs() < 1e-5, "{l1} against {l3}");
    // 100 validation samples, split between the ranks.
    within_one_sample(a1, a3, 100, "three ranks");
    none_left(&dir);
}

/// The CSV of the non-finite tests: 48 rows of 4 features and a target; row 40 is so large that
/// its squared error overflows, in the second batch of 24.
fn overflowing_rows() -> String {
    let mut rows = vec!["a,b,c,d,label".to_string()];
    for i in 0..48 {
        let x = if i == 40 {
            1e30
        } else {
            f64::from(i % 7) / 7.0
        };
        rows.push(format!("{x},{x},{x},{x},{}", f64::from(i % 5) / 5.0));
    }
    rows.join("\n") + "\n"
}

/// A linear model on `overflowing_rows`, trained for 4 steps with the strategy `parallel`.
fn overflowing(parallel: &str) -> String {
    format!(
        r#"experiment "nan" {{
  seed 5
  data {{
    source csv("data.csv")
    batch 24
    shuffle false
  }}
  model {{
    input [4]
    fc: linear(1)
  }}
  device cpu
  {parallel}
  optimizer sgd(lr: 0.1)
  train {{
    steps 4
    loss mse
  }}
}}
"#
    )
}

/// At world size 1 no collective runs (each is the identity over one rank), and nothing else
/// changes: the same parameters, losses and metrics as a run without a strategy, and a
/// non-finite loss stops the run at the same step with the same diagnostic.
#[test]
fn world_size_1_trains_as_a_run_without_a_strategy() {
    let dir = scratch("ddp-world-1");
    let single = write(&dir, "single.exp", &experiment("", "0.1", 20));
    let one = write(
        &dir,
        "one.exp",
        &experiment("parallel ddp(backend: gloo, world_size: 1)", "0.1", 20),
    );
    run_to_end(&single, &dir.join("single"));
    run_to_end(&one, &dir.join("one"));
    assert_eq!(newest_checkpoint(&dir.join("one")), Some(20));
    let d = max_difference(&dir.join("single"), &dir.join("one"));
    assert!(d < 1e-5, "the parameters differ by {d}");
    let (a, b) = (
        support::report(&dir.join("single")),
        support::report(&dir.join("one")),
    );
    let number = |r: &serde_yaml::Value, path: &[&str]| {
        path.iter()
            .fold(r, |v, k| &v[*k])
            .as_f64()
            .unwrap_or_else(|| panic!("{path:?} in the report"))
    };
    for path in [
        &["train_loss"][..],
        &["val", "loss"][..],
        &["val", "accuracy"][..],
    ] {
        let (x, y) = (number(&a, path), number(&b, path));
        assert!(
            (x - y).abs() < 1e-5,
            "{path:?}: {x} without a strategy, {y} with"
        );
    }
    write(&dir, "data.csv", &overflowing_rows());
    let mut stopped = Vec::new();
    for (name, parallel) in [
        ("nan-single", ""),
        (
            "nan-one",
            "parallel ddp(backend: gloo, world_size: 1, timeout: 20s)",
        ),
    ] {
        let exp = write(&dir, &format!("{name}.exp"), &overflowing(parallel));
        let child = runtime(&["run", s(&exp), "--quiet", "--run-dir", s(&dir.join(name))])
            .spawn()
            .expect("start");
        let (out, _) = finish(child, Duration::from_secs(60));
        let all = text(&out);
        assert!(!out.status.success(), "{all}");
        assert!(
            all.contains("× the loss became infinite at step 2"),
            "{name} stops at step 2:\n{all}"
        );
        stopped.push(out.status.code());
    }
    assert_eq!(stopped[0], stopped[1], "the same exit status");
    none_left(&dir);
}

#[test]
fn a_killed_rank_stops_every_rank() {
    let dir = scratch("ddp-killed");
    let exp = write(
        &dir,
        "long.exp",
        &experiment(
            "parallel ddp(backend: gloo, world_size: 3, timeout: 10s)",
            "0.01",
            1_000_000,
        ),
    );
    let (out, took) = kill_a_rank(&exp, &dir.join("run"), 2);
    let all = text(&out);
    assert!(!out.status.success(), "{all}");
    assert!(took < Duration::from_secs(15), "took {took:?}");
    assert!(all.contains("K0514"), "{all}");
    assert!(
        all.contains("rank 2 stopped (killed by SIGKILL"),
        "the launcher names the rank:\n{all}"
    );
    // The ranks that survived say so too, each naming the rank that stopped.
    assert!(
        all.contains("rank 0: rank 2 stopped") && all.contains("[rank 1]"),
        "{all}"
    );
    none_left(&dir);
}

#[test]
fn a_rank_that_never_arrives_is_named_within_the_timeout() {
    let dir = scratch("ddp-missing");
    let exp = write(
        &dir,
        "three.exp",
        &experiment(
            "parallel ddp(backend: gloo, world_size: 3, timeout: 3s)",
            "0.1",
            20,
        ),
    );
    let p = port();
    let ranks: Vec<Child> = (0..2)
        .map(|r| rank(&exp, &dir.join("run"), r, 3, p))
        .collect();
    for (r, child) in ranks.into_iter().enumerate() {
        let (out, took) = finish(child, Duration::from_secs(30));
        let all = text(&out);
        assert!(!out.status.success(), "{all}");
        assert!(took < Duration::from_secs(12), "rank {r} took {took:?}");
        assert!(all.contains("K0515"), "{all}");
        assert!(
            all.contains(&format!("rank 2 never arrived at 127.0.0.1:{p} within 3s")),
            "{all}"
        );
    }
    none_left(&dir);
}

#[test]
fn a_rank_with_another_experiment_is_named_before_training() {
    let dir = scratch("ddp-differ");
    let parallel = "parallel ddp(backend: gloo, world_size: 3, timeout: 20s)";
    let a = write(&dir, "a.exp", &experiment(parallel, "0.1", 20));
    let b = write(&dir, "b.exp", &experiment(parallel, "0.2", 20));
    let p = port();
    let ranks: Vec<Child> = (0..3)
        .map(|r| rank(if r == 2 { &b } else { &a }, &dir.join("run"), r, 3, p))
        .collect();
    for child in ranks {
        let (out, took) = finish(child, Duration::from_secs(30));
        let all = text(&out);
        assert!(!out.status.success(), "{all}");
        assert!(took < Duration::from_secs(20), "took {took:?}");
        assert!(all.contains("K0516"), "{all}");
        assert!(
            all.contains("rank 0 and rank 2 run different experiments")
                && all.contains("learning rate: 0.1 → 0.2"),
            "{all}"
        );
    }
    // No rank trained: rank 0 wrote no checkpoint.
    assert_eq!(newest_checkpoint(&dir.join("run")), None);
    none_left(&dir);
}

#[test]
fn a_non_finite_loss_on_one_rank_stops_every_rank_at_that_step() {
    let dir = scratch("ddp-nan");
    // Row 40 falls in the second batch, in rank 1's half of it; rank 0's half is finite.
    write(&dir, "data.csv", &overflowing_rows());
    let exp = write(
        &dir,
        "nan.exp",
        &overflowing("parallel ddp(backend: gloo, world_size: 2, timeout: 20s)"),
    );
    let child = runtime(&["run", s(&exp), "--quiet", "--run-dir", s(&dir.join("run"))])
        .spawn()
        .expect("start");
    let (out, took) = finish(child, Duration::from_secs(60));
    let all = text(&out);
    assert!(!out.status.success(), "{all}");
    assert!(took < Duration::from_secs(20), "took {took:?}");
    assert!(
        all.contains("[rank 1]   × the loss became infinite at step 2")
            && all.contains("\n  × the loss became infinite at step 2"),
        "both ranks stop at step 2:\n{all}"
    );
    none_left(&dir);
}

/// A run stopped by a signal at 2 ranks resumes at 2 and at 3 ranks as the uninterrupted run:
/// without batch norm the ranks compute what one process on the whole batch computes, so the
/// world size is a setting a resume may change (recorded in the report). With batch norm, each
/// rank normalising by its own rows, another world size is refused (K0507).
#[test]
fn resume_at_the_same_world_size_or_another_continues_and_batch_norm_refuses_another() {
    let dir = scratch("ddp-resume");
    let two = write(
        &dir,
        "two.exp",
        &experiment("parallel ddp(backend: gloo, world_size: 2)", "0.01", 300),
    );
    let three = write(
        &dir,
        "three.exp",
        &experiment("parallel ddp(backend: gloo, world_size: 3)", "0.01", 300),
    );
    run_to_end(&two, &dir.join("whole"));
    // A stop signal reaches the launcher, which passes it on: every rank stops after the same
    // step, and rank 0 writes a checkpoint there.
    let interrupted = |name: &str, exp: &Path| {
        let run = dir.join(name);
        let launcher = runtime(&["run", s(exp), "--quiet", "--run-dir", s(&run)])
            .spawn()
            .expect("start");
        let started = Instant::now();
        while newest_checkpoint(&run).is_none() {
            assert!(started.elapsed() < Duration::from_secs(60), "no checkpoint");
            std::thread::sleep(Duration::from_millis(5));
        }
        // SAFETY: our own child, still running.
        unsafe { libc::kill(launcher.id() as i32, libc::SIGTERM) };
        let (out, _) = finish(launcher, Duration::from_secs(60));
        let all = text(&out);
        assert!(!out.status.success(), "{all}");
        assert!(all.contains("K0506"), "{all}");
        let stopped = newest_checkpoint(&run).expect("a checkpoint");
        assert!(stopped < 300, "the run was not interrupted: {all}");
        run
    };
    for (name, then) in [("same", &two), ("other", &three)] {
        let run = interrupted(name, &two);
        let child = runtime(&["run", s(then), "--quiet", "--resume", s(&run)])
            .spawn()
            .expect("start");
        let (out, _) = finish(child, Duration::from_secs(120));
        assert!(out.status.success(), "{name}: {}", text(&out));
        assert_eq!(newest_checkpoint(&run), Some(300));
        let d = max_difference(&dir.join("whole"), &run);
        assert!(d < 1e-5, "{name}: the resumed run differs by {d}");
    }
    let report = std::fs::read_to_string(dir.join("other").join("report.yaml")).expect("report");
    assert!(
        report.contains(
            "data parallel: ddp(backend: gloo, world_size: 2) → ddp(backend: gloo, world_size: 3)"
        ),
        "{report}"
    );
    // With batch norm another world size is refused.
    let normed = |parallel: &str| {
        experiment(parallel, "0.01", 300)
            .replace("    tanh\n", "    norm: batchnorm1d\n    tanh\n")
            .replace("    batch 24\n", "    batch 24\n    drop_last true\n")
    };
    let two = write(
        &dir,
        "two-bn.exp",
        &normed("parallel ddp(backend: gloo, world_size: 2)"),
    );
    let three = write(
        &dir,
        "three-bn.exp",
        &normed("parallel ddp(backend: gloo, world_size: 3)"),
    );
    let run = interrupted("bn", &two);
    let child = runtime(&["run", s(&three), "--quiet", "--resume", s(&run)])
        .spawn()
        .expect("start");
    let (out, _) = finish(child, Duration::from_secs(60));
    let all = support::flat(&text(&out));
    assert!(!out.status.success(), "{all}");
    assert!(
        all.contains("K0507")
            && all.contains("strategy: was `ddp(backend: gloo, world_size: 2)`, is now `ddp(backend: gloo, world_size: 3)`"),
        "{all}"
    );
    none_left(&dir);
}

/// The TCP sockets listening in process `pid`: their local addresses, read from `/proc` (the
/// socket inodes among its open files, found in the kernel's tables of TCP sockets).
fn listeners(pid: u32) -> Vec<std::net::SocketAddr> {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.filter_map(|e| {
                let link = std::fs::read_link(e.ok()?.path()).ok()?;
                let link = link.to_str()?;
                Some(
                    link.strip_prefix("socket:[")?
                        .strip_suffix(']')?
                        .to_string(),
                )
            })
            .collect()
        })
        .unwrap_or_default();
    // The kernel prints each address as 32-bit words in the machine's byte order.
    let words = |hex: &str| -> Vec<u8> {
        (0..hex.len() / 8)
            .flat_map(|i| {
                let w = u32::from_str_radix(&hex[8 * i..8 * i + 8], 16).expect("hex");
                w.to_ne_bytes()
            })
            .collect()
    };
    let mut out = Vec::new();
    for table in ["tcp", "tcp6"] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            // Columns: slot, local address, remote address, state (0A: listening), ..., inode.
            if cols.len() < 10 || cols[3] != "0A" || !inodes.iter().any(|i| i == cols[9]) {
                continue;
            }
            let (addr, port) = cols[1].split_once(':').expect("address:port");
            let bytes = words(addr);
            let ip = match bytes.len() {
                4 => IpAddr::V4(Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3])),
                _ => IpAddr::V6(Ipv6Addr::from(
                    <[u8; 16]>::try_from(bytes.as_slice()).expect("16 bytes"),
                )),
            };
            out.push(SocketAddr::new(
                ip,
                u16::from_str_radix(port, 16).expect("port"),
            ));
        }
    }
    out
}

/// Whether `ip` is a loopback address (an IPv4 one written as IPv6 included).
fn is_loopback(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(v4) => v4.is_loopback(),
        std::net::IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// Every listener of a local two-rank run (rank 0's store, each rank's Gloo pairs) is bound to
/// the loopback address, and none answers on this machine's network address.
#[test]
fn a_local_run_listens_on_loopback_only() {
    let dir = scratch("ddp-listen");
    let exp = write(
        &dir,
        "long.exp",
        &experiment(
            "parallel ddp(backend: gloo, world_size: 2, timeout: 10s)",
            "0.01",
            1_000_000,
        ),
    );
    let run = dir.join("run");
    let launcher = runtime(&["run", s(&exp), "--quiet", "--run-dir", s(&run)])
        .spawn()
        .expect("start");
    // Every rank has met the others and made its process group once rank 0 checkpointed.
    let started = Instant::now();
    while newest_checkpoint(&run).is_none() {
        assert!(started.elapsed() < Duration::from_secs(60), "no checkpoint");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pids = processes_with(s(&exp));
    let ranks: Vec<u32> = pids
        .iter()
        .copied()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|e| e.split(|b| *b == 0).any(|v| v.starts_with(b"RANK=")))
        })
        .collect();
    let found: Vec<(u32, std::net::SocketAddr)> = pids
        .iter()
        .flat_map(|&pid| listeners(pid).into_iter().map(move |a| (pid, a)))
        .collect();
    // This machine's address on its default route, when it has one.
    let own = std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|u| u.connect("203.0.113.1:9").and(u.local_addr()))
        .ok()
        .map(|a| a.ip())
        .filter(|ip| !ip.is_loopback() && !ip.is_unspecified());
    let reachable: Vec<std::net::SocketAddr> = own
        .into_iter()
        .flat_map(|ip| found.iter().map(move |(_, a)| (ip, a.port()).into()))
        .filter(|a| std::net::TcpStream::connect_timeout(a, Duration::from_secs(1)).is_ok())
        .collect();
    // SAFETY: our own child, still running.
    unsafe { libc::kill(launcher.id() as i32, libc::SIGTERM) };
    let _ = finish(launcher, Duration::from_secs(60));
    none_left(&dir);
    assert_eq!(ranks.len(), 2, "two ranks among {pids:?}");
    // The store and a Gloo listener in each rank: a listing that missed them proves nothing.
    for r in &ranks {
        assert!(
            found.iter().any(|(pid, _)| pid == r),
            "rank process {r} listens nowhere: {found:?}"
        );
    }
    let open: Vec<_> = found.iter().filter(|(_, a)| !is_loopback(a.ip())).collect();
    assert!(open.is_empty(), "listening beyond loopback: {open:?}");
    assert!(
        reachable.is_empty(),
        "reachable on {own:?}: {reachable:?} (listeners {found:?})"
    );
}

/// Rank 0 serves the store on `MASTER_ADDR` alone: an address that is not this machine's
/// (one of TEST-NET-2, which no machine has) is named at once, where listening on every
/// interface would have hidden it until the timeout.
#[test]
fn rank_0_serves_the_store_on_master_addr_alone() {
    let dir = scratch("ddp-master-addr");
    let exp = write(
        &dir,
        "two.exp",
        &experiment(
            "parallel ddp(backend: gloo, world_size: 2, timeout: 20s)",
            "0.1",
            20,
        ),
    );
    let p = port();
    let mut c = runtime(&["run", s(&exp), "--quiet", "--threads", "1", "--run-dir"]);
    c.arg(dir.join("run"))
        .env("RANK", "0")
        .env("WORLD_SIZE", "2")
        .env("MASTER_ADDR", "198.51.100.7")
        .env("MASTER_PORT", p.to_string());
    let (out, took) = finish(c.spawn().expect("start"), Duration::from_secs(30));
    let all = support::flat(&text(&out));
    assert!(!out.status.success(), "{all}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert!(
        all.contains("K0515")
            && all.contains(&format!("the store cannot listen on 198.51.100.7:{p}, which must be an address of this machine")),
        "{all}"
    );
    none_left(&dir);
}
