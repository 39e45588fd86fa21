//! The image, built and run (issue 20, part 3): `deploy/Dockerfile`'s runtime stage, with
//! `scratch` in place of its distroless base and the help-desk binary this test run built plus
//! the shared libraries it needs in place of the build stage (no registry is reached), built
//! with `podman` and run: help-desk answers `/readyz` from inside the container, runs as the
//! image's unprivileged user, and stops with exit 0 on the image's stop signal.
//!
//! Needs `podman` on `PATH`; without it the test says so and passes (`apt-get install podman`,
//! plus `runc` on hosts whose cgroups are in hybrid mode, which crun refuses). Every wait is
//! bounded.

#[path = "../../e2e_support.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use support::TempDir;

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

fn podman(args: &[&str]) -> Output {
    Command::new("podman")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("podman {args:?}: {e}"))
}

fn podman_ok(args: &[&str]) -> String {
    let out = podman(args);
    assert!(
        out.status.success(),
        "podman {args:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The shared libraries `binary` loads (`ldd`), the dynamic loader included.
fn libraries(binary: &Path) -> Vec<PathBuf> {
    let out = Command::new("ldd").arg(binary).output().expect("run ldd");
    assert!(out.status.success(), "ldd {}", binary.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let path = match line.split_once("=>") {
                Some((_, rest)) => rest.split_whitespace().next()?,
                None => line.split_whitespace().next()?,
            };
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

/// `deploy/Dockerfile`'s runtime stage (everything after its last `FROM`), its files from the
/// build stage left out: the settings the image runs with (`ENV`, `EXPOSE`, `USER`,
/// `STOPSIGNAL`, `ENTRYPOINT`).
fn runtime_stage() -> Vec<String> {
    let file = support::repo_root().join("deploy/Dockerfile");
    let text = std::fs::read_to_string(&file).expect("read deploy/Dockerfile");
    let lines: Vec<&str> = text.lines().collect();
    let last_from = lines
        .iter()
        .rposition(|l| l.starts_with("FROM "))
        .expect("deploy/Dockerfile has a FROM");
    lines[last_from + 1..]
        .iter()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#') && !l.starts_with("COPY --from"))
        .map(|l| l.to_string())
        .collect()
}

/// The soft limit named `name` in `/proc/self/limits` (`Max open files`), if numeric.
fn soft_limit(name: &str) -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with(name))?;
    line[name.len()..].split_whitespace().next()?.parse().ok()
}

/// Removes the container and the image, whatever the test's outcome.
struct Cleanup {
    container: String,
    image: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = Command::new("podman")
            .args(["rm", "-f", &self.container])
            .output();
        let _ = Command::new("podman")
            .args(["rmi", "-f", &self.image])
            .output();
    }
}

#[test]
fn the_image_serves_readyz_and_stops_gracefully() {
    if !on_path("podman") {
        eprintln!("podman is not on PATH: the image is not built (apt-get install podman runc)");
        return;
    }
    let dir = TempDir::new("image");
    let context = dir.path();
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_help-desk"));
    let bin_dir = context.join("usr/local/bin");
    std::fs::create_dir_all(&bin_dir).expect("create usr/local/bin");
    std::fs::copy(&binary, bin_dir.join("server")).expect("copy the binary");
    let libs = libraries(&binary);
    assert!(
        libs.iter().any(|l| l.to_string_lossy().contains("libc.so")),
        "ldd found no libc: {libs:?}"
    );
    for lib in &libs {
        let target = context.join(lib.strip_prefix("/").expect("an absolute path"));
        std::fs::create_dir_all(target.parent().expect("a parent")).expect("create a lib dir");
        std::fs::copy(lib, &target).unwrap_or_else(|e| panic!("copy {}: {e}", lib.display()));
    }
    let stage = runtime_stage();
    assert!(
        stage.iter().any(|l| l.starts_with("ENTRYPOINT"))
            && stage.iter().any(|l| l.starts_with("USER")),
        "deploy/Dockerfile's runtime stage: {stage:?}"
    );
    let mut containerfile = String::from("FROM scratch\nCOPY usr /usr\n");
    // Libraries under /usr come with `usr`; the others with their top directory.
    for top in ["lib", "lib64", "lib32"] {
        if context.join(top).is_dir() {
            containerfile.push_str(&format!("COPY {top} /{top}\n"));
        }
    }
    containerfile.push_str(&stage.join("\n"));
    containerfile.push('\n');
    std::fs::write(context.join("Containerfile"), &containerfile).expect("write Containerfile");

    let tag = format!("localhost/fleetmcp-test-help-desk:{}", std::process::id());
    let name = format!("fleetmcp-test-help-desk-{}", std::process::id());
    let _cleanup = Cleanup {
        container: name.clone(),
        image: tag.clone(),
    };
    let context_arg = context.to_string_lossy().into_owned();
    podman_ok(&["build", "-q", "-t", &tag, &context_arg]);

    // No rlimit above this process's own (raising one needs CAP_SYS_RESOURCE, which a sandbox
    // may not grant), and runc where it is installed (crun refuses hybrid cgroups).
    let nofile = soft_limit("Max open files").unwrap_or(1024).min(4096);
    let nproc = soft_limit("Max processes").unwrap_or(1024).min(4096);
    let (nofile, nproc) = (
        format!("nofile={nofile}:{nofile}"),
        format!("nproc={nproc}:{nproc}"),
    );
    let port = support::free_port();
    let publish = format!("127.0.0.1:{port}:3000");
    let mut run: Vec<&str> = Vec::new();
    if on_path("runc") {
        run.extend(["--runtime", "runc"]);
    }
    run.extend([
        "run",
        "-d",
        "--name",
        &name,
        "--ulimit",
        &nofile,
        "--ulimit",
        &nproc,
        "-p",
        &publish,
        "-e",
        "RUST_LOG=info",
        &tag,
    ]);
    podman_ok(&run);

    let start = Instant::now();
    let ready = loop {
        match support::http_get(port, "/readyz") {
            Ok(r) if r.status == 200 => break r,
            other => {
                if start.elapsed() > Duration::from_secs(30) {
                    let logs = podman(&["logs", &name]);
                    panic!(
                        "/readyz not 200 within 30 s: {other:?}\n--- container log ---\n{}{}",
                        String::from_utf8_lossy(&logs.stdout),
                        String::from_utf8_lossy(&logs.stderr)
                    );
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    };
    assert!(
        ready.body.contains("\"status\":\"ready\""),
        "{}",
        ready.describe()
    );
    // It listens on every interface (the image's FRONTMCP_BIND_ADDRESS), as the user the image
    // names, not root.
    let logs = podman_ok(&["logs", &name]);
    let logs = format!(
        "{logs}{}",
        String::from_utf8_lossy(&podman(&["logs", &name]).stderr)
    );
    assert!(
        logs.contains("listening on http://0.0.0.0:3000/mcp"),
        "{logs}"
    );
    let user = podman_ok(&["inspect", "--format", "{{.Config.User}}", &name]);
    assert_eq!(user, "65532:65532");

    // The image's stop signal starts the graceful stop: exit 0.
    podman_ok(&["stop", "-t", "15", &name]);
    let code = podman_ok(&["inspect", "--format", "{{.State.ExitCode}}", &name]);
    let logs = podman(&["logs", &name]);
    assert_eq!(
        code,
        "0",
        "exit code after podman stop:\n{}{}",
        String::from_utf8_lossy(&logs.stdout),
        String::from_utf8_lossy(&logs.stderr)
    );
}
