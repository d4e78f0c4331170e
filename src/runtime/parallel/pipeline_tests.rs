//! The schedules' orders, and a pipelined pass against the same batch on one device: the same
//! gradients, stages on their own threads at the same time, a non-finite loss that ends the pass.

use std::sync::Mutex;
use std::thread::ThreadId;

use tch::{Device, Kind, Tensor};

use super::*;
use crate::runtime::model::build;
use crate::runtime::parallel::Local;
use kiln::ir::Parallel;

const EXP: &str = r#"
experiment "pipe" {
  data {
    source synthetic(inputs: normal([6]), targets: randint(3), count: 64)
    batch 16
  }
  model {
    input [6]
    a: linear(8)
    tanh
    block b {
      c: linear(8)
      relu
    }
    d: linear(3)
  }
  device cpu
  parallel pipeline(stages: 3, micro_batches: 4, schedule: 1f1b)
  optimizer sgd(lr: 0.1)
  train {
    steps 1
    loss cross_entropy
  }
}
"#;

fn experiment() -> Experiment {
    let checked = kiln::check::check_text("pipe.exp", EXP);
    assert!(!checked.has_errors(), "{:#?}", checked.diagnostics);
    checked.trials.into_iter().next().expect("a trial")
}

/// The largest micro-batch count each stage holds at once under `ops`.
fn in_flight(ops: &[Op]) -> usize {
    let (mut now, mut most) = (0usize, 0usize);
    for op in ops {
        match op {
            Op::Forward(_) => now += 1,
            Op::Backward(_) => now -= 1,
        }
        most = most.max(now);
    }
    most
}

#[test]
fn schedules_run_every_micro_batch_once_and_bound_what_is_in_flight() {
    for (p, m) in [(2, 4), (3, 4), (4, 2), (3, 1)] {
        for k in 0..p {
            for schedule in [PipelineSchedule::GPipe, PipelineSchedule::OneFOneB] {
                let ops = order(schedule, k, p, m);
                let forwards: Vec<usize> = ops
                    .iter()
                    .filter_map(|o| match o {
                        Op::Forward(j) => Some(*j),
                        Op::Backward(_) => None,
                    })
                    .collect();
                let backwards: Vec<usize> = ops
                    .iter()
                    .filter_map(|o| match o {
                        Op::Backward(j) => Some(*j),
                        Op::Forward(_) => None,
                    })
                    .collect();
                assert_eq!(forwards, (0..m).collect::<Vec<_>>());
                assert_eq!(backwards, (0..m).collect::<Vec<_>>());
                let expected = match schedule {
                    PipelineSchedule::GPipe => m,
                    PipelineSchedule::OneFOneB => (p - k).min(m),
                };
                assert_eq!(in_flight(&ops), expected, "{schedule:?} k {k} p {p} m {m}");
            }
        }
    }
    use Op::{Backward as B, Forward as F};
    assert_eq!(
        order(PipelineSchedule::OneFOneB, 0, 3, 4),
        [F(0), F(1), F(2), B(0), F(3), B(1), B(2), B(3)]
    );
    assert_eq!(
        order(PipelineSchedule::OneFOneB, 2, 3, 4),
        [F(0), B(0), F(1), B(1), F(2), B(2), F(3), B(3)]
    );
}

/// The gradients of every parameter after `f` ran on a freshly built model (same seed).
fn gradients(f: impl FnOnce(&Net)) -> Vec<Vec<f64>> {
    let exp = experiment();
    tch::manual_seed(11);
    let net = build(&exp.model.nodes, exp.train.precision, Some(Device::Cpu)).expect("builds");
    f(&net);
    net.params
        .iter()
        .map(|p| {
            let g = p.tensor.grad().to_kind(Kind::Double).flatten(0, -1);
            Vec::<f64>::try_from(&g).expect("values")
        })
        .collect()
}

fn batch_data() -> (Tensor, Tensor) {
    tch::manual_seed(5);
    let x = Tensor::randn([16, 6], (Kind::Float, Device::Cpu));
    let y = Tensor::randint(3, [16], (Kind::Int64, Device::Cpu));
    (x, y)
}

#[test]
fn stages_run_on_their_own_threads_at_once_and_give_the_one_device_gradients() {
    let exp = experiment();
    let objective = Objective::new(&exp);
    let (x, y) = batch_data();
    let batch = Batch {
        x: &x,
        y: &y,
        accumulate: 2,
        scale: 1.0,
        whole: objective.whole(&y).expect("the batch's weight"),
        dropout: 7,
        span: exp.optimizer.span,
    };
    let local = gradients(|net| {
        Local.backprop(net, &objective, &batch).expect("local pass");
    });
    let events: Mutex<Vec<(usize, Op, ThreadId)>> = Mutex::new(Vec::new());
    let piped = gradients(|net| {
        let Parallel::Pipeline { boundaries, .. } = &exp.parallel else {
            panic!("a pipeline")
        };
        assert_eq!(boundaries, &[0, 1, 3], "a | tanh, b | d");
        let mut pipe = Pipeline::new(net, boundaries, 4, PipelineSchedule::OneFOneB);
        let record = |k: usize, op: Op| {
            let id = std::thread::current().id();
            events.lock().expect("lock").push((k, op, id));
        };
        let pass = pipe
            .pass(
                &objective,
                (&x, &y),
                (&batch.whole, 1.0),
                batch.span,
                &record,
            )
            .expect("pipelined pass");
        assert!(pass.values().expect("values")[0].is_finite());
    });
    for (a, b) in local.iter().flatten().zip(piped.iter().flatten()) {
        assert!((a - b).abs() < 1e-6, "{a} vs {b}");
    }
    assert_eq!(local.concat().len(), piped.concat().len());
    assert!(local.concat().iter().any(|g| g.abs() > 1e-3), "{local:?}");

    let events = events.into_inner().expect("events");
    assert_eq!(events.len(), 3 * 8);
    let threads: Vec<ThreadId> = (0..3)
        .map(|k| events.iter().find(|e| e.0 == k).expect("stage ran").2)
        .collect();
    for (k, t) in threads.iter().enumerate() {
        assert_ne!(
            *t,
            std::thread::current().id(),
            "stage {k} ran on the caller"
        );
        assert!(events.iter().filter(|e| e.0 == k).all(|e| e.2 == *t));
        assert_eq!(
            threads.iter().filter(|u| *u == t).count(),
            1,
            "a shared thread"
        );
    }
    // The later stages' first backwards need activations stage 0 sends after its first
    // operation, and stage 0's last backward needs gradients they send after them: they fall
    // between stage 0's first and last operation, so the stages' threads ran at the same time.
    // (An operation is recorded as it starts, before its input arrives, so only such orders,
    // which the data forces, are asserted.)
    let at = |k: usize, op: Op| {
        events
            .iter()
            .position(|e| e.0 == k && e.1 == op)
            .expect("event")
    };
    let first = at(0, Op::Forward(0));
    let last = at(0, Op::Backward(3));
    for k in 1..3 {
        let op = Op::Backward(0);
        assert!((first..last).contains(&at(k, op)), "{k} {op:?}: {events:?}");
    }
}

#[test]
fn a_non_finite_loss_is_the_pass_s_loss_on_every_schedule() {
    let exp = experiment();
    let objective = Objective::new(&exp);
    let (x, y) = batch_data();
    // Micro-batch 2 of 4 (samples 8..12) holds a NaN.
    let _ = x.narrow(0, 9, 1).fill_(f64::NAN);
    let batch = Batch {
        x: &x,
        y: &y,
        accumulate: 1,
        scale: 1.0,
        whole: objective.whole(&y).expect("the batch's weight"),
        dropout: 7,
        span: exp.optimizer.span,
    };
    for schedule in [PipelineSchedule::GPipe, PipelineSchedule::OneFOneB] {
        let exp = experiment();
        let net = build(&exp.model.nodes, exp.train.precision, Some(Device::Cpu)).expect("builds");
        let mut pipe = Pipeline::new(&net, &[0, 1, 3], 4, schedule);
        let pass = pipe.backprop(&net, &objective, &batch).expect("a pass");
        let [loss, ..] = pass.values().expect("values");
        assert!(loss.is_nan(), "{schedule:?}");
    }
}
