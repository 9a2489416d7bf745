//! Training code nobody on the team wrote: PyTorch Lightning's `Trainer` and transformers'
//! `Trainer` (a small config-built BERT, no download), on CPU under the collector, automatic
//! phases only. Lightning runs forward and backward inside `optimizer.step`'s closure, and
//! transformers' callbacks run between the phases: the verdict must put a leak where it is.

use collector::analysis::{Analysis, FindingKind, analyze};
use collector::recording::Phase;

use crate::{Job, stderr};

const LIGHTNING: &str = r#"
import os, torch
from torch import nn
import lightning as L
from torch.utils.data import DataLoader, TensorDataset

class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 1))
        self.kept = []
    def training_step(self, batch, i):
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        if os.environ.get("LEAK") == "1":
            self.kept.append(torch.randn(2 << 20))  # 8 MiB kept every step
        return loss
    def validation_step(self, batch, i):
        x, y = batch
        self.log("val", nn.functional.mse_loss(self.net(x), y))
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

torch.manual_seed(0)
data = TensorDataset(torch.randn(640, 64), torch.randn(640, 1))
trainer = L.Trainer(max_epochs=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False, limit_val_batches=2,
                    val_check_interval=10)
trainer.fit(Net(), DataLoader(data, batch_size=32), DataLoader(data, batch_size=32))
"#;

const TRANSFORMERS: &str = r#"
import os, torch
from torch.utils.data import Dataset
from transformers import (BertConfig, BertForSequenceClassification, Trainer, TrainerCallback,
                          TrainingArguments)

config = BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=128, max_position_embeddings=64, num_labels=2)
torch.manual_seed(0)
model = BertForSequenceClassification(config)

class Data(Dataset):
    def __len__(self):
        return 512
    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return {"input_ids": torch.randint(0, 1000, (32,), generator=g), "labels": torch.tensor(i % 2)}

kept = []
class Keep(TrainerCallback):
    def on_step_end(self, args, state, control, **kw):
        if os.environ.get("LEAK") == "1":
            kept.append(torch.randn(2 << 20))  # 8 MiB kept every step

args = TrainingArguments(output_dir="out", per_device_train_batch_size=8, max_steps=40,
                         logging_steps=1000, save_strategy="no", report_to=[], use_cpu=True,
                         disable_tqdm=True, dataloader_num_workers=0)
Trainer(model=model, args=args, train_dataset=Data(), callbacks=[Keep()]).train()
"#;

/// A Lightning model whose gradients (8 MiB) are as large as its parameters, as in real models:
/// Lightning's automatic optimisation runs `training_step` inside the optimizer's closure and
/// clears the gradients there after it (`set_to_none=True`), before the backward. With
/// `IN_PLACE=1` its `optimizer_zero_grad` hook zeroes them in place instead
/// (`set_to_none=False`): then they stay allocated between the steps.
const LIGHTNING_GRADIENTS: &str = r#"
import os, torch
from torch import nn
import lightning as L
from torch.utils.data import DataLoader, TensorDataset

class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024))
    def training_step(self, batch, i):
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)
    def validation_step(self, batch, i):
        x, y = batch
        self.log("val", nn.functional.mse_loss(self.net(x), y))
    def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
        optimizer.zero_grad(set_to_none=os.environ.get("IN_PLACE") != "1")
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

torch.manual_seed(0)
torch.set_num_threads(1)
data = TensorDataset(torch.randn(64 * 40, 1024), torch.randn(64 * 40, 1024))
trainer = L.Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False, limit_val_batches=2,
                    val_check_interval=10)
trainer.fit(Net(), DataLoader(data, batch_size=64), DataLoader(data, batch_size=64))
"#;

fn run(script: &str, leak: bool) -> Analysis {
    run_with(script, &[("LEAK", if leak { "1" } else { "0" })])
}

/// The analysis of `script` run under the collector with `env` set.
fn run_with(script: &str, env: &[(&str, &str)]) -> Analysis {
    let job = Job::new(script);
    let output = job
        .command(&[])
        .envs(env.iter().copied())
        .env("OMP_NUM_THREADS", "1")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    analyze(&job.recording())
}

fn count(analysis: &Analysis, phase: &Phase) -> usize {
    analysis
        .phases
        .iter()
        .find(|p| &p.phase == phase)
        .map_or(0, |p| p.occurrences)
}

#[test]
fn lightning_a_leak_in_training_step_is_in_the_optimizer_closure() {
    let analysis = run(LIGHTNING, true);
    // 20 batches × 2 epochs; validation every 10 batches, 2 batches each, each validation one
    // eval (from Lightning's `eval()` to the next training forward); the sanity check's 2 batches
    // run before the model trained, each an eval of its own.
    assert_eq!(
        count(&analysis, &Phase::Forward),
        40,
        "{:#?}",
        analysis.phases
    );
    assert_eq!(count(&analysis, &Phase::Backward), 40);
    assert_eq!(count(&analysis, &Phase::Optimizer), 40);
    assert_eq!(count(&analysis, &Phase::Eval), 6, "{:#?}", analysis.phases);
    let leak = analysis
        .finding(FindingKind::Leak)
        .unwrap_or_else(|| panic!("{:#?}", analysis.findings));
    assert_eq!(
        leak.title.split(':').next(),
        Some("Host memory leak in optimizer closure")
    );
    assert!(
        leak.hints.iter().any(|h| h.contains("training_step")),
        "{:#?}",
        leak.hints
    );
    // The census names the list on the LightningModule, wherever the Trainer keeps it.
    let holder = analysis.holders.first().expect("a holder that grew");
    assert!(
        holder.name.ends_with(".kept") && leak.title.contains(&holder.name),
        "{holder:#?} {}",
        leak.title
    );
    assert_kept_8_mib_a_step(leak);
}

/// The rate a leak of 8 MiB a step states: the C heap's, read by the probe at every step start,
/// which is exact whatever else runs on the machine or is installed (resident memory is not:
/// 5.4 to 5.7 MiB/step beside other tests, with matplotlib imported by Lightning).
fn assert_kept_8_mib_a_step(leak: &collector::analysis::Finding) {
    let growth = leak.growth_per_step_bytes.unwrap() / (1 << 20) as f64;
    assert!(
        (7.6..8.4).contains(&growth),
        "{growth} MiB/step for 8 MiB kept a step: {leak:#?}"
    );
}

#[test]
fn lightning_without_a_leak_has_none() {
    let analysis = run(LIGHTNING, false);
    assert_eq!(count(&analysis, &Phase::Optimizer), 40);
    assert!(
        analysis.finding(FindingKind::Leak).is_none(),
        "{:#?}",
        analysis.findings
    );
}

#[test]
fn transformers_trainer_a_callback_that_keeps_tensors_leaks_between_phases() {
    let analysis = run(TRANSFORMERS, true);
    assert_eq!(
        count(&analysis, &Phase::Forward),
        40,
        "{:#?}",
        analysis.phases
    );
    assert_eq!(count(&analysis, &Phase::Backward), 40);
    assert_eq!(count(&analysis, &Phase::Optimizer), 40);
    let leak = analysis
        .finding(FindingKind::Leak)
        .unwrap_or_else(|| panic!("{:#?}", analysis.findings));
    assert_eq!(
        leak.title.split(':').next(),
        Some("Host memory leak between phases")
    );
    assert!(
        leak.hints.iter().any(|h| h.contains("on_step_end")),
        "{:#?}",
        leak.hints
    );
    assert!(
        leak.title.ends_with("held by __main__.kept"),
        "{}",
        leak.title
    );
    assert_kept_8_mib_a_step(leak);
}

#[test]
fn transformers_trainer_without_a_leak_has_none() {
    let analysis = run(TRANSFORMERS, false);
    assert_eq!(count(&analysis, &Phase::Forward), 40);
    assert!(
        analysis.finding(FindingKind::Leak).is_none(),
        "{:#?}",
        analysis.findings
    );
}

/// Lightning frees the gradients in its closure, after `training_step`'s forward and before the
/// backward: they are not said to stay allocated, run after run, but to live through the
/// forward. Zeroed in place by the model's own `optimizer_zero_grad`, they are said kept, with
/// the advice that would free them.
#[test]
fn lightning_gradients_freed_in_the_closure_are_not_said_to_be_kept() {
    for run in 1..=2 {
        let analysis = run_with(LIGHTNING_GRADIENTS, &[]);
        assert_eq!(count(&analysis, &Phase::Optimizer), 40, "run {run}");
        assert!(
            analysis.finding(FindingKind::GradientsKept).is_none(),
            "run {run}: {:#?} ({:?})",
            analysis.findings,
            analysis.attribution_note
        );
        assert!(
            analysis.finding(FindingKind::Leak).is_none(),
            "run {run}: {:#?}",
            analysis.findings
        );
        // What does happen is said: they live through the forward.
        assert!(
            host(&analysis).gradients_freed_after_forward,
            "run {run}: {:#?}",
            analysis.categories
        );
    }
    let in_place = run_with(LIGHTNING_GRADIENTS, &[("IN_PLACE", "1")]);
    let kept = in_place
        .finding(FindingKind::GradientsKept)
        .unwrap_or_else(|| panic!("{:#?}", in_place.findings));
    assert!(kept.title.contains("8.01 MiB"), "{}", kept.title);
    assert!(
        kept.hints.iter().any(|h| h.contains("set_to_none=True")),
        "{:#?}",
        kept.hints
    );
    assert!(!host(&in_place).gradients_freed_after_forward);
}

/// The host's categories (a CPU job's).
fn host(analysis: &Analysis) -> &collector::analysis::CategoryStats {
    analysis
        .categories
        .iter()
        .find(|c| c.device.is_none())
        .unwrap_or_else(|| panic!("{:#?}", analysis.categories))
}
