//! The Kubernetes manifests in `deploy/k8s/` (issue 12, item 4), parsed and checked against the
//! configuration the binaries accept: every environment variable they set is one fleetmcp reads
//! (`fleetmcp::internals::environment_variables()`), the whole environment and TOML file load
//! through `Config::from_sources` (so every value parses), `MACHINE_ID` is the pod's name, the
//! session secret comes from a Secret, the probes hit `/readyz` and `/healthz` on the port the
//! server listens on, and the termination grace period covers preStop + drain + shutdown grace.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fleetmcp::Config;
use fleetmcp::config::DeploymentMode;
use fleetmcp::internals::environment_variables;
use serde::Deserialize;
use serde_json::Value;

fn k8s_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/k8s")
}

/// Every document of every `.yaml` file, with the file it came from.
fn documents() -> Vec<(String, Value)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(k8s_dir())
        .expect("deploy/k8s exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut docs = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).expect("read manifest");
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let yaml = serde_yaml::Value::deserialize(doc)
                .unwrap_or_else(|e| panic!("{}: not YAML: {e}", path.display()));
            let json = serde_json::to_value(&yaml).expect("YAML as JSON");
            docs.push((name.clone().unwrap_or_default(), json));
        }
    }
    docs
}

fn of_kind<'a>(docs: &'a [(String, Value)], kind: &str) -> Vec<&'a Value> {
    docs.iter()
        .map(|(_, d)| d)
        .filter(|d| d["kind"] == kind)
        .collect()
}

fn named<'a>(docs: &'a [(String, Value)], kind: &str, name: &str) -> &'a Value {
    of_kind(docs, kind)
        .into_iter()
        .find(|d| d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} named {name} in deploy/k8s"))
}

fn str_of<'a>(v: &'a Value, what: &str) -> &'a str {
    v.as_str()
        .unwrap_or_else(|| panic!("{what} is not a string: {v}"))
}

fn u64_of(v: &Value, what: &str) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("{what} is not a number: {v}"))
}

/// `$(NAME)` references in `value`, replaced by the values set before (as Kubernetes does).
fn expand(value: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = value.to_string();
    for (k, v) in env {
        out = out.replace(&format!("$({k})"), v);
    }
    out
}

/// What the fleet's pods run with: the workload, its one container, the environment as the
/// pod `fleetmcp-0` would see it, and the variables' names with where each came from.
struct Pod<'a> {
    workload: &'a Value,
    container: &'a Value,
    env: BTreeMap<String, String>,
    /// Name -> how it is set (`value`, `fieldRef:<path>`, `secret:<name>`, `configMap:<name>`).
    sources: BTreeMap<String, String>,
}

fn pod(docs: &[(String, Value)]) -> Pod<'_> {
    let workload = named(docs, "StatefulSet", "fleetmcp");
    let containers = workload["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers");
    assert_eq!(containers.len(), 1, "one container per pod");
    let container = &containers[0];
    let pod_name = format!("{}-0", str_of(&workload["metadata"]["name"], "name"));
    let (mut env, mut sources) = (BTreeMap::new(), BTreeMap::new());
    for from in container["envFrom"].as_array().into_iter().flatten() {
        let (kind, data, source) = if let Some(name) = from["configMapRef"]["name"].as_str() {
            ("ConfigMap", "data", format!("configMap:{name}"))
        } else if let Some(name) = from["secretRef"]["name"].as_str() {
            ("Secret", "stringData", format!("secret:{name}"))
        } else {
            panic!("envFrom neither a ConfigMap nor a Secret: {from}")
        };
        let name = source.split_once(':').map(|(_, n)| n).unwrap_or_default();
        let map = named(docs, kind, name)[data]
            .as_object()
            .unwrap_or_else(|| panic!("{kind} {name} has no {data}"));
        for (k, v) in map {
            env.insert(k.clone(), str_of(v, k).to_string());
            sources.insert(k.clone(), source.clone());
        }
    }
    for var in container["env"].as_array().into_iter().flatten() {
        let name = str_of(&var["name"], "env name").to_string();
        let (value, source) = if let Some(v) = var["value"].as_str() {
            (expand(v, &env), "value".to_string())
        } else if let Some(path) = var["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            assert_eq!(
                path, "metadata.name",
                "{name}: only the pod's name is resolved here"
            );
            (pod_name.clone(), format!("fieldRef:{path}"))
        } else if var["valueFrom"]["secretKeyRef"].is_object() {
            let r = &var["valueFrom"]["secretKeyRef"];
            let secret = named(docs, "Secret", str_of(&r["name"], "secret name"));
            let key = str_of(&r["key"], "secret key");
            let v = secret["stringData"][key]
                .as_str()
                .unwrap_or_else(|| panic!("Secret lacks {key}"));
            (v.to_string(), format!("secret:{}", str_of(&r["name"], "")))
        } else {
            panic!("{name}: a source this test does not know: {var}")
        };
        env.insert(name.clone(), value);
        sources.insert(name, source);
    }
    Pod {
        workload,
        container,
        env,
        sources,
    }
}

/// The TOML file `FLEETMCP_CONFIG` names, from the ConfigMap mounted there, written to a
/// temporary file.
fn config_file(docs: &[(String, Value)], pod: &Pod<'_>, dir: &Path) -> PathBuf {
    let wanted = pod
        .env
        .get("FLEETMCP_CONFIG")
        .expect("FLEETMCP_CONFIG is set");
    let spec = &pod.workload["spec"]["template"]["spec"];
    for mount in pod.container["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let at = str_of(&mount["mountPath"], "mountPath");
        let Some(file) = wanted.strip_prefix(&format!("{at}/")) else {
            continue;
        };
        let volume = spec["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["name"] == mount["name"])
            .expect("the mount's volume");
        let cm = named(
            docs,
            "ConfigMap",
            str_of(&volume["configMap"]["name"], "cm"),
        );
        let text = str_of(&cm["data"][file], file);
        let path = dir.join(file);
        std::fs::write(&path, text).expect("write the TOML");
        return path;
    }
    panic!("FLEETMCP_CONFIG={wanted} is not in a mounted ConfigMap")
}

#[test]
fn every_variable_the_manifests_set_is_one_fleetmcp_reads() {
    let docs = documents();
    let pod = pod(&docs);
    let known: Vec<&str> = environment_variables().collect();
    let unknown: Vec<&String> = pod
        .sources
        .keys()
        .filter(|k| !known.contains(&k.as_str()))
        .collect();
    assert!(
        unknown.is_empty(),
        "variables fleetmcp does not read: {unknown:?} (it reads {known:?})"
    );
    assert_eq!(pod.sources["MACHINE_ID"], "fieldRef:metadata.name");
    assert!(
        pod.sources["MCP_SESSION_SECRET"].starts_with("secret:"),
        "the session secret comes from a Secret"
    );
    assert!(
        pod.sources["REDIS_URL"].starts_with("configMap:"),
        "the Redis address comes from configuration"
    );
}

#[test]
fn the_manifests_configuration_loads_and_matches_probes_ports_and_grace() {
    let docs = documents();
    let pod = pod(&docs);
    let dir = tempfile::tempdir().expect("temp dir");
    let toml = config_file(&docs, &pod, dir.path());
    let config = Config::from_sources(Some(&toml), &pod.env)
        .unwrap_or_else(|e| panic!("the manifests' configuration does not load: {e}"));
    assert_eq!(config.deployment_mode, DeploymentMode::Distributed);
    assert_eq!(config.machine_id.as_deref(), Some("fleetmcp-0"));
    assert!(config.redis.is_some(), "Redis configured");

    // The named port is the one the server listens on, and both probes use it.
    let ports = pod.container["ports"].as_array().expect("ports");
    let port_of = |p: &Value| -> u64 {
        match p {
            Value::String(name) => ports
                .iter()
                .find(|q| q["name"] == name.as_str())
                .map(|q| u64_of(&q["containerPort"], "containerPort"))
                .unwrap_or_else(|| panic!("no port named {name}")),
            other => u64_of(other, "port"),
        }
    };
    for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")] {
        let get = &pod.container[probe]["httpGet"];
        assert_eq!(get["path"], path, "{probe}");
        assert_eq!(
            port_of(&get["port"]),
            u64::from(config.port),
            "{probe} port"
        );
    }

    // Out of the endpoints within the drain; the kubelet waits for preStop + drain + grace + the
    // second fleetmcp takes to exit.
    let drain_ms = config.drain_delay().as_millis() as u64;
    let grace_ms = config.http.shutdown_grace_ms;
    let ready = &pod.container["readinessProbe"];
    let detect_ms = u64_of(&ready["periodSeconds"], "periodSeconds")
        * u64_of(&ready["failureThreshold"], "failureThreshold")
        * 1000;
    assert!(
        detect_ms < drain_ms,
        "readiness detects a stop in {detect_ms} ms, not within the {drain_ms} ms drain"
    );
    let pre_stop_ms = u64_of(
        &pod.container["lifecycle"]["preStop"]["sleep"]["seconds"],
        "preStop sleep",
    ) * 1000;
    let termination_ms = u64_of(
        &pod.workload["spec"]["template"]["spec"]["terminationGracePeriodSeconds"],
        "terminationGracePeriodSeconds",
    ) * 1000;
    assert!(
        termination_ms >= pre_stop_ms + drain_ms + grace_ms + 1000,
        "terminationGracePeriodSeconds ({termination_ms} ms) < preStop {pre_stop_ms} + drain {drain_ms} + grace {grace_ms} + 1000 ms"
    );

    // Others relay to <pod>.<headless service>:<port>.
    let peers = str_of(&pod.workload["spec"]["serviceName"], "serviceName");
    let headless = named(&docs, "Service", peers);
    assert_eq!(headless["spec"]["clusterIP"], "None");
    // A pod checks that it reaches itself at its advertised name before it says ready: the
    // name must resolve while the pod is not ready yet, or it never becomes ready.
    assert_eq!(headless["spec"]["publishNotReadyAddresses"], true);
    assert_eq!(
        config.ha.advertise_address.as_deref(),
        Some(format!("fleetmcp-0.{peers}:{}", config.port).as_str())
    );
}

#[test]
fn the_disruption_budget_and_services_select_the_fleets_pods() {
    let docs = documents();
    let pod = pod(&docs);
    let labels = &pod.workload["spec"]["template"]["metadata"]["labels"];
    assert_eq!(&pod.workload["spec"]["selector"]["matchLabels"], labels);
    let pdbs = of_kind(&docs, "PodDisruptionBudget");
    assert_eq!(pdbs.len(), 1, "one PodDisruptionBudget");
    assert_eq!(&pdbs[0]["spec"]["selector"]["matchLabels"], labels);
    assert_eq!(pdbs[0]["spec"]["maxUnavailable"], 1);
    for name in ["fleetmcp", "fleetmcp-peers"] {
        assert_eq!(
            &named(&docs, "Service", name)["spec"]["selector"],
            labels,
            "Service {name}"
        );
    }
    // `kubectl apply -k deploy/k8s` applies every file.
    let kustomization = named_kustomization(&docs);
    let listed: Vec<&str> = kustomization["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .map(|r| str_of(r, "resource"))
        .collect();
    let mut files: Vec<&str> = docs
        .iter()
        .filter(|(_, d)| d["kind"] != "Kustomization")
        .map(|(f, _)| f.as_str())
        .collect();
    files.dedup();
    for f in files {
        assert!(listed.contains(&f), "kustomization.yaml lacks {f}");
    }
}

fn named_kustomization(docs: &[(String, Value)]) -> &Value {
    of_kind(docs, "Kustomization")
        .into_iter()
        .next()
        .expect("a kustomization.yaml")
}
