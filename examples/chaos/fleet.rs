//! The worker processes (`outbox relay`): started, killed, replaced and stopped; and what their
//! logs say.
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sea_orm_outbox::RetryPolicy;

use crate::scratch::BoxError;
use crate::{log, Run};

/// The `outbox` binary: `given`, or the one next to this example's executable.
pub fn relay_bin(given: Option<&Path>) -> Result<PathBuf, BoxError> {
    let relay_bin = match given {
        Some(p) => p.to_owned(),
        None => {
            // target/<profile>/examples/chaos -> target/<profile>/outbox
            let exe = std::env::current_exe()?;
            exe.parent()
                .and_then(Path::parent)
                .map(|d| d.join("outbox"))
                .ok_or("cannot locate the outbox binary; pass --relay-bin")?
        }
    };
    if !relay_bin.is_file() {
        return Err(format!(
            "{} not found: build it first (`cargo build --release -p sea-orm-outbox-cli --features chaos-testing --bin outbox`) or pass --relay-bin",
            relay_bin.display()
        )
        .into());
    }
    Ok(relay_bin)
}

/// One worker process.
struct Proc {
    child: Child,
    id: String,
}

/// Starts, kills and replaces the worker processes.
pub struct Fleet {
    bin: PathBuf,
    args: Vec<String>,
    envs: Vec<(String, String)>,
    log_dir: PathBuf,
    procs: Vec<Option<Proc>>,
    /// Worker processes started so far.
    pub spawned: u64,
    /// Workers killed by `--kill-every`.
    pub kills: u64,
    /// Workers that exited by themselves (and were replaced).
    pub unexpected_exits: u64,
}

impl Fleet {
    /// Starts `--workers` relays of `run` with its worker flags and `policy`'s retries.
    pub fn start(run: &Run, policy: &RetryPolicy) -> Result<Self, BoxError> {
        let args = &run.args;
        let ms = |d: Duration| format!("{}ms", d.as_millis());
        let mut worker_args = vec![
            "--poll-delay".to_owned(),
            ms(args.poll_delay),
            "--batch".to_owned(),
            args.batch.to_string(),
            "--lease".to_owned(),
            ms(args.lease),
            "--send-timeout".to_owned(),
            ms(args.send_timeout),
            "--max-retries".to_owned(),
            policy.max_retries.to_string(),
            "--retry-backoff".to_owned(),
            ms(policy.backoff_base),
            "--retry-max-backoff".to_owned(),
            ms(policy.max_backoff),
            "--completion".to_owned(),
            args.completion.as_str().to_owned(),
        ];
        if let Some(o) = args.ordered {
            worker_args.extend(["--ordered".to_owned(), o.as_str().to_owned()]);
        }
        if args.slow_send {
            worker_args.push("--chaos-send-stall".to_owned());
            worker_args.push(format!("{}:{}", args.slow_send_every, ms(args.lease * 2)));
        }
        let mut fleet = Fleet {
            bin: run.relay_bin.clone(),
            args: worker_args,
            envs: vec![
                ("DATABASE_URL".into(), run.url.clone()),
                ("ROCKETMQ_NAMESRV_ADDR".into(), run.namesrv.clone()),
                ("OUTBOX_TOPIC".into(), run.topic.clone()),
                (
                    "ROCKETMQ_PRODUCER_GROUP".into(),
                    format!("chaos_pg_{}", run.id),
                ),
                (
                    "RUST_LOG".into(),
                    "warn,outbox=info,sea_orm_outbox_rocketmq=debug".into(),
                ),
            ],
            log_dir: run.log_dir.clone(),
            procs: (0..args.workers).map(|_| None).collect(),
            spawned: 0,
            kills: 0,
            unexpected_exits: 0,
        };
        if let Some(f) = &args.failover {
            fleet.envs.push(("ROCKETMQ_FAILOVER".into(), f.clone()));
        }
        for slot in 0..args.workers {
            fleet.spawn(slot)?;
        }
        Ok(fleet)
    }

    /// Starts a worker in `slot`, logging to `<log dir>/chaos-w<slot>-g<n>.log`.
    fn spawn(&mut self, slot: usize) -> Result<(), BoxError> {
        self.spawned += 1;
        let id = format!("chaos-w{slot}-g{}", self.spawned);
        let log = std::fs::File::create(self.log_dir.join(format!("{id}.log")))?;
        let child = Command::new(&self.bin)
            .arg("relay")
            .args(&self.args)
            .args(["--instance-id", &id])
            .envs(self.envs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.bin.display()))?;
        self.procs[slot] = Some(Proc { child, id });
        Ok(())
    }

    /// Restarts workers that exited by themselves (they should not).
    pub fn reap(&mut self) -> Result<(), BoxError> {
        for slot in 0..self.procs.len() {
            let exited = match self.procs[slot].as_mut() {
                Some(p) => p.child.try_wait()?.map(|s| (p.id.clone(), s)),
                None => None,
            };
            if let Some((id, status)) = exited {
                self.unexpected_exits += 1;
                let last = std::fs::read_to_string(self.log_dir.join(format!("{id}.log")))
                    .ok()
                    .and_then(|t| t.lines().last().map(str::to_owned))
                    .unwrap_or_default();
                log(format!(
                    "worker {id} exited by itself ({status}): {last}; starting another"
                ));
                self.spawn(slot)?;
            }
        }
        Ok(())
    }

    /// SIGKILLs the worker in `slot` and starts another there.
    pub fn kill_one(&mut self, slot: usize) -> Result<(), BoxError> {
        if let Some(mut p) = self.procs[slot].take() {
            p.child.kill().ok(); // SIGKILL
            p.child.wait().ok();
            self.kills += 1;
        }
        self.spawn(slot)
    }

    /// SIGTERM to every worker (graceful: leases handed back, producer shut down), SIGKILL after
    /// 20 s.
    pub fn stop_all(&mut self) {
        for p in self.procs.iter().flatten() {
            Command::new("kill")
                .args(["-TERM", &p.child.id().to_string()])
                .status()
                .ok();
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        for slot in 0..self.procs.len() {
            if let Some(mut p) = self.procs[slot].take() {
                loop {
                    match p.child.try_wait() {
                        Ok(Some(_)) | Err(_) => break,
                        Ok(None) if Instant::now() > deadline => {
                            log(format!("worker {} ignored SIGTERM; SIGKILL", p.id));
                            p.child.kill().ok();
                            p.child.wait().ok();
                            break;
                        }
                        Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                    }
                }
            }
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for p in self.procs.iter_mut().flatten() {
            p.child.kill().ok();
            p.child.wait().ok();
        }
    }
}

/// Sums `key=N` over the log lines containing `marker` in every worker log.
pub fn sum_from_logs(dir: &Path, marker: &str, key: &str) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let prefix = format!("{key}=");
    let mut total = 0;
    for e in entries.filter_map(Result::ok) {
        let Ok(text) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        for line in text.lines().filter(|l| l.contains(marker)) {
            if let Some(n) = line
                .split_whitespace()
                .find_map(|t| t.strip_prefix(&prefix))
                .and_then(|v| v.trim_end_matches(',').parse::<u64>().ok())
            {
                total += n;
            }
        }
    }
    total
}

/// The worker-log lines that contain `needle`, each prefixed with its file name.
pub fn grep_logs(dir: &Path, needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        out.extend(
            text.lines()
                .filter(|l| l.contains(needle))
                .map(|l| format!("{name}: {l}")),
        );
    }
    out
}

/// The worker-log lines that contain `marker`, in every worker log.
pub fn count_in_logs(dir: &Path, marker: &str) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .map(|t| t.lines().filter(|l| l.contains(marker)).count() as u64)
        .sum()
}
