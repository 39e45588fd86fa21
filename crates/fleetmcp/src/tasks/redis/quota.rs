//! Bounds, fleet-wide, as in memory: `tasks.max_tasks` and `tasks.max_bytes` over every task,
//! the `_per_owner` pair per session, the `_per_caller` pair per caller (its limit key, kept as a
//! digest). A task is charged its record's bytes plus, while it works, what its handler holds
//! (its arguments): so the bound also caps what a crowd of working tasks costs the instances
//! running them. One script ([`super::scripts::QUOTA_RESERVE`]) checks and charges every group at once before
//! the record is written, dropping the oldest finished records of a full group to make room
//! (the script returns their keys, deleted next); with only working tasks left, the new task is
//! refused naming the bound. A task's end re-charges its final size ([`super::scripts::QUOTA_END`]). The quota
//! keys share one Cluster slot (hash tag `{quota}`); entries are scored by their record's
//! expiry and trimmed on every call, and the keys expire twice a task's lifetime after their
//! last write, so a count cannot outlive what it counts (no `KEYS`, every call bounded). A
//! session still keeps at most `tasks.max_tasks_per_owner` ids in its index (as before);
//! `tasks.max_result_bytes` bounds each record. Every command is bounded by the shared
//! connection's timeout.

use super::scripts::{QUOTA_END, QUOTA_HELPERS, QUOTA_RELEASE, QUOTA_RESERVE};
use super::{RedisTaskStore, warn_failed};
use crate::tasks::{TaskRecord, TaskStoreError, TaskStoreFull};

impl RedisTaskStore {
    /// The quota's keys (`all`, `meta`, `totals`) and the prefix of its groups' `done` sets,
    /// in one Cluster slot.
    fn quota_keys(&self) -> ([String; 3], String) {
        let base = format!("{}quota:{{quota}}:", self.prefix);
        (
            [
                format!("{base}all"),
                format!("{base}meta"),
                format!("{base}totals"),
            ],
            format!("{base}done:"),
        )
    }

    /// The groups a task counts in, with their bounds: every task, its session's, its caller's
    /// (under a digest of the caller's key: no address or principal is written in the clear).
    fn quota_groups(
        &self,
        owner: Option<&str>,
        caller: Option<&str>,
    ) -> Vec<(String, usize, usize)> {
        let l = &self.limits;
        let mut groups = vec![("all".to_string(), l.max_tasks, l.max_bytes)];
        if let Some(o) = owner {
            groups.push((
                format!("s:{o}"),
                l.max_tasks_per_owner,
                l.max_bytes_per_owner,
            ));
        }
        if let Some(c) = caller {
            use sha2::Digest;
            let digest = sha2::Sha256::digest(c.as_bytes());
            let hex: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
            groups.push((
                format!("c:{hex}"),
                l.max_tasks_per_caller,
                l.max_bytes_per_caller,
            ));
        }
        groups
    }

    /// The quota script `body` with its keys and `args` (after the done prefix).
    fn quota_cmd(&self, body: &str, args: &[String]) -> redis::Cmd {
        let (keys, done) = self.quota_keys();
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(format!("{QUOTA_HELPERS}{body}"))
            .arg(3)
            .arg(&keys[..])
            .arg(done)
            .arg(args);
        cmd
    }

    /// Deletes the records the quota dropped to make room (each on its own slot); an error
    /// leaves the record to its expiry, already uncounted.
    async fn delete_victims(&self, keys: &[String]) {
        for key in keys {
            if let Err(e) = self
                .redis
                .run::<i64>(redis::cmd("DEL").arg(key).clone())
                .await
            {
                tracing::debug!(error = %e, key, "a task record dropped to make room stays until it expires");
            }
        }
    }

    /// Charges a new task to its groups (see [`QUOTA_RESERVE`]).
    pub(super) async fn reserve(
        &self,
        record: &TaskRecord,
        key: &str,
        bytes: usize,
        caller: Option<&str>,
    ) -> Result<(), TaskStoreError> {
        let ttl = record.ttl_ms.max(1);
        let mut args = vec![
            record.task_id.clone(),
            bytes.to_string(),
            ttl.to_string(),
            key.to_string(),
            (ttl.saturating_mul(2)).to_string(),
        ];
        let groups = self.quota_groups(record.owner.as_deref(), caller);
        for (g, n, b) in &groups {
            args.extend([g.clone(), n.to_string(), b.to_string()]);
        }
        let out: Vec<String> = self
            .redis
            .run(self.quota_cmd(QUOTA_RESERVE, &args))
            .await
            .map_err(|e| {
                warn_failed("bounding a new task", &record.task_id, &e);
                TaskStoreError::Unavailable(e.to_string())
            })?;
        match out.first().map(String::as_str) {
            Some("1") => {
                self.delete_victims(&out[1..]).await;
                Ok(())
            }
            Some("0") if out.len() >= 3 => {
                self.delete_victims(&out[3..]).await;
                let l = &self.limits;
                let count = out[2] == "n";
                let (limit, max) = match (out[1].split(':').next(), count) {
                    (Some("s"), true) => ("tasks.max_tasks_per_owner", l.max_tasks_per_owner),
                    (Some("s"), false) => ("tasks.max_bytes_per_owner", l.max_bytes_per_owner),
                    (Some("c"), true) => ("tasks.max_tasks_per_caller", l.max_tasks_per_caller),
                    (Some("c"), false) => ("tasks.max_bytes_per_caller", l.max_bytes_per_caller),
                    (_, true) => ("tasks.max_tasks", l.max_tasks),
                    (_, false) => ("tasks.max_bytes", l.max_bytes),
                };
                Err(TaskStoreError::Full(TaskStoreFull { limit, max }))
            }
            _ => Err(TaskStoreError::Unavailable(format!(
                "unexpected answer of the task quota: {out:?}"
            ))),
        }
    }

    /// Takes back the charge of a task whose record was not written.
    pub(super) async fn release(&self, task_id: &str) {
        let cmd = self.quota_cmd(QUOTA_RELEASE, &[task_id.to_string()]);
        if let Err(e) = self.redis.run::<i64>(cmd).await {
            // Counted until its expiry: a bound slightly tighter for a while, never looser.
            warn_failed("releasing a task's charge", task_id, &e);
        }
    }

    /// A task ended: its charge becomes its final record (see [`QUOTA_END`]).
    pub(super) async fn charge_end(&self, record: &TaskRecord, bytes: usize) {
        let mut args = vec![
            record.task_id.clone(),
            bytes.to_string(),
            (record.ttl_ms.max(1).saturating_mul(2)).to_string(),
        ];
        // The task's groups are read from its own entry; the bounds by kind of group.
        let l = &self.limits;
        args.extend(
            [
                l.max_tasks,
                l.max_bytes,
                l.max_tasks_per_owner,
                l.max_bytes_per_owner,
                l.max_tasks_per_caller,
                l.max_bytes_per_caller,
            ]
            .map(|n| n.to_string()),
        );
        match self
            .redis
            .run::<Vec<String>>(self.quota_cmd(QUOTA_END, &args))
            .await
        {
            Ok(victims) => self.delete_victims(&victims).await,
            Err(e) => warn_failed("recounting an ended task", &record.task_id, &e),
        }
    }
}
