//! A sweep's trials: their labels, and CPU trials run side by side in processes of their own.

use std::path::PathBuf;

use super::options::RunOptions;
use super::print::eprint;
use crate::runtime::model::tch_device;
use kiln::ir::Experiment;

/// A trial's values, `lr = 0.01, batch = 64`.
pub fn trial_label(exp: &Experiment) -> String {
    exp.trial
        .iter()
        .map(|(k, v)| format!("{k} = {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether every layer of the trial runs on the CPU here.
pub fn on_cpu(exp: &Experiment, opts: &RunOptions) -> bool {
    match opts.device {
        Some(d) => tch_device(d) == tch::Device::Cpu,
        None => kiln::ir::layers(&exp.model.nodes)
            .iter()
            .all(|l| tch_device(l.device) == tch::Device::Cpu),
    }
}

/// Runs CPU trials side by side, each in its own `kiln-runtime` process (so each has its own
/// random generators and a crash stays contained), as many at once as there are cores, and
/// splits the cores between them.
pub fn run_concurrently(opts: &RunOptions, dirs: &[(usize, &Experiment, PathBuf)]) -> i32 {
    use rayon::prelude::*;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let jobs = cores.min(dirs.len()).max(1);
    let threads = (cores / jobs).max(1);
    let Ok(exe) = std::env::current_exe() else {
        eprint("error: cannot locate kiln-runtime to start the trials\n");
        return 2;
    };
    let Ok(pool) = rayon::ThreadPoolBuilder::new().num_threads(jobs).build() else {
        eprint("error: cannot start the trial pool\n");
        return 2;
    };
    if !opts.quiet {
        eprint(&format!(
            "running {} trials, {jobs} at a time, {threads} thread(s) each\n",
            dirs.len()
        ));
    }
    let total = dirs.len();
    let failed: usize = pool.install(|| {
        dirs.par_iter()
            .map(|(i, exp, dir)| {
                let mut cmd = std::process::Command::new(&exe);
                cmd.arg("run")
                    .arg(&opts.file)
                    .args([
                        "--quiet",
                        "--trial",
                        &i.to_string(),
                        "--threads",
                        &threads.to_string(),
                    ])
                    .arg("--run-dir")
                    .arg(dir);
                if let Some(d) = opts.device {
                    cmd.args(["--device", &d.to_string()]);
                }
                if let Some(init) = &opts.init {
                    cmd.arg("--init").arg(init);
                }
                if let Some(m) = opts.max_steps {
                    cmd.args(["--max-steps", &m.to_string()]);
                }
                let ok = kiln::supervise::spawn(&mut cmd)
                    .and_then(kiln::supervise::Supervised::wait)
                    .is_ok_and(|e| e.code == Some(0));
                if !opts.quiet {
                    let result = if ok {
                        crate::runtime::summary::short_result(dir)
                    } else {
                        "failed".to_string()
                    };
                    eprint(&format!(
                        "trial {i} of {total} ({}): {result}\n",
                        trial_label(exp)
                    ));
                }
                usize::from(!ok)
            })
            .sum()
    });
    crate::runtime::summary::sweep_table(dirs);
    i32::from(failed > 0)
}
