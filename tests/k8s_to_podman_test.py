#!/usr/bin/env python3
"""scripts/k8s-to-podman on the real docker/k8s manifests, and on broken
copies of them: what podman kube play will be given. scripts/test-images
runs the result; this checks the translation where podman is not installed.
"""

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "k8s-to-podman")
MANIFESTS = os.path.join(ROOT, "docker", "k8s")


def run(manifests, *args):
    out = tempfile.mkdtemp()
    proc = subprocess.run(
        [sys.executable, SCRIPT, manifests, "--out", out, "--node-name", "node-a", *args],
        capture_output=True,
        text=True,
    )
    return proc, out


def workload(out, name):
    """The documents of the play file for workload `name`, by kind."""
    for f in sorted(os.listdir(out)):
        if f.endswith(f"-{name}.yaml"):
            with open(os.path.join(out, f)) as fh:
                docs = list(yaml.safe_load_all(fh))
            return {d["kind"]: d for d in docs}
    raise AssertionError(f"no play file for {name} in {sorted(os.listdir(out))}")


def containers(doc):
    return doc["spec"]["template"]["spec"]["containers"]


class Translation(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.proc, cls.out = run(
            MANIFESTS,
            "--image", "heterotune/server=local/server:t",
            "--skip", "hpo-worker-gpu",
            "--replicas", "hpo-worker-cpu=2",
            "--cpu-limit", "hpo-worker-cpu=1",
        )
        if cls.proc.returncode != 0:
            raise AssertionError(cls.proc.stderr)
        with open(os.path.join(cls.out, "plan")) as f:
            cls.plan = [line.split() for line in f if line.strip()]

    def test_the_plan_makes_the_secret_then_plays_each_workload_with_its_service_names(self):
        self.assertEqual([p[0] for p in self.plan], ["secret", "play", "play", "play"])
        plays = {os.path.basename(p[1]).split("-", 1)[1]: p[2] for p in self.plan if p[0] == "play"}
        self.assertEqual(plays, {"postgres.yaml": "postgres", "hpo-server.yaml": "hpo-server",
                                 "hpo-worker-cpu.yaml": "-"})

    def test_the_secret_is_what_secretkeyref_reads_in_podman(self):
        name, path = self.plan[0][1], self.plan[0][2]
        self.assertEqual(name, "hpo-secrets")
        with open(path) as f:
            data = json.load(f)
        with open(os.path.join(MANIFESTS, "secrets.yaml")) as f:
            string_data = yaml.safe_load(f)["stringData"]
        self.assertEqual({k: base64.b64decode(v).decode() for k, v in data.items()}, string_data)

    def test_the_statefulset_runs_as_a_deployment_on_the_claim_kubernetes_would_make(self):
        docs = workload(self.out, "postgres")
        self.assertNotIn("StatefulSet", docs)
        self.assertEqual(docs["PersistentVolumeClaim"]["metadata"]["name"], "data-postgres-0")
        volumes = docs["Deployment"]["spec"]["template"]["spec"]["volumes"]
        self.assertIn({"name": "data", "persistentVolumeClaim": {"claimName": "data-postgres-0"}}, volumes)
        self.assertNotIn("volumeClaimTemplates", docs["Deployment"]["spec"])

    def test_no_port_is_published_and_probes_name_ports_by_number(self):
        server = containers(workload(self.out, "hpo-server")["Deployment"])[0]
        self.assertNotIn("ports", server)
        self.assertEqual(server["readinessProbe"]["httpGet"]["port"], 8080)
        self.assertEqual(server["livenessProbe"]["httpGet"]["port"], 8080)
        self.assertEqual(server["image"], "local/server:t")

    def test_node_name_and_its_reference_in_args_are_filled_in(self):
        worker = containers(workload(self.out, "hpo-worker-cpu")["Deployment"])[0]
        env = {e["name"]: e for e in worker["env"]}
        self.assertEqual(env["NODE_NAME"], {"name": "NODE_NAME", "value": "node-a"})
        self.assertIn("pool=cpu,node=node-a", worker["args"])
        # metadata.name is one podman supports: it stays a fieldRef.
        self.assertEqual(env["HPO_WORKER_INSTANCE"]["valueFrom"]["fieldRef"]["fieldPath"], "metadata.name")

    def test_replicas_and_cpu_limit_change_only_the_named_workload(self):
        workers = workload(self.out, "hpo-worker-cpu")["Deployment"]
        self.assertEqual(workers["spec"]["replicas"], 2)
        self.assertEqual(containers(workers)[0]["resources"]["limits"]["cpu"], "1")
        self.assertEqual(containers(workers)[0]["resources"]["requests"]["cpu"], "1")
        self.assertEqual(workload(self.out, "hpo-server")["Deployment"]["spec"]["replicas"], 2)

    def test_a_skipped_workload_has_no_play_file(self):
        self.assertFalse(any("gpu" in f for f in os.listdir(self.out)))


class BadInput(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        shutil.copytree(MANIFESTS, self.dir, dirs_exist_ok=True)

    def edit(self, file, old, new):
        path = os.path.join(self.dir, file)
        with open(path) as f:
            text = f.read()
        self.assertIn(old, text)
        with open(path, "w") as f:
            f.write(text.replace(old, new))

    def assertRefused(self, *args, says):
        proc, out = run(self.dir, *args)
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertIn(says, proc.stderr)
        self.assertFalse(os.path.exists(os.path.join(out, "plan")), "a refused translation writes no plan")

    def test_a_kind_podman_cannot_run_is_named(self):
        with open(os.path.join(self.dir, "ingress.yaml"), "w") as f:
            f.write("apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: web}\n")
        self.edit("kustomization.yaml", "  - workers.yaml\n", "  - workers.yaml\n  - ingress.yaml\n")
        self.assertRefused(says="ingress.yaml: Ingress web: kind Ingress has no translation")

    def test_a_service_that_remaps_a_port_is_refused(self):
        self.edit("server.yaml", "      port: 8080\n", "      port: 80\n")
        self.assertRefused(says="Service hpo-server: port 80 -> 8080: a network alias cannot remap a port")

    def test_a_statefulset_of_two_is_refused(self):
        self.edit("postgres.yaml", "  replicas: 1\n", "  replicas: 2\n")
        self.assertRefused(says="StatefulSet postgres: replicas 2")

    def test_a_reference_to_a_value_known_only_in_the_pod_is_refused(self):
        self.edit("workers.yaml", "node=$(NODE_NAME)", "node=$(HPO_TOKEN)")
        self.assertRefused(says="$(HPO_TOKEN) in the command line takes its value from valueFrom")

    def test_options_name_what_is_wrong(self):
        self.assertRefused("--replicas", "hpo-worker-cpu=two", says="--replicas 'hpo-worker-cpu=two'")
        self.assertRefused("--skip", "hpo-worker-tpu", says="no workload named 'hpo-worker-tpu'")


if __name__ == "__main__":
    unittest.main()
