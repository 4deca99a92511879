// docker/ without a Docker engine: every YAML file parses, and the
// Dockerfiles, the compose file, the Prometheus configuration and the
// Kubernetes manifests refer only to what exists — files the images COPY,
// build contexts, volumes, networks, services, Secrets and their keys,
// container ports — and pass hpo-server and hpo-worker only the flags their
// --help lists, on the ports those flags name.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "testing/files.h"

namespace hpo {
namespace {

namespace fs = std::filesystem;

const fs::path kRoot = HPO_SOURCE_DIR;
const fs::path kDocker = kRoot / "docker";

using hpo::testing::ReadFile;

// The long flags a binary's --help lists ("--store", "--http", ...).
std::set<std::string> HelpFlags(const std::string& binary) {
  std::set<std::string> flags;
  FILE* p = popen((binary + " --help 2>&1").c_str(), "r");
  if (p == nullptr) return flags;
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
  pclose(p);
  const std::regex flag(R"(--[a-z][a-z0-9-]*)");
  for (std::sregex_iterator it(out.begin(), out.end(), flag), end; it != end; ++it)
    flags.insert(it->str());
  return flags;
}

std::vector<std::string> Strings(const YAML::Node& seq) {
  std::vector<std::string> out;
  if (seq && seq.IsSequence()) {
    for (const auto& n : seq) out.push_back(n.as<std::string>());
  }
  return out;
}

// The port of a "HOST:PORT" argument that follows `flag` in `args`, or -1.
int PortAfter(const std::vector<std::string>& args, const std::string& flag) {
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == flag) return std::stoi(args[i + 1].substr(args[i + 1].rfind(':') + 1));
  }
  return -1;
}

// Which binary an image runs.
std::string BinaryOf(const std::string& image) {
  if (image.find("heterotune/server") == 0) return "hpo-server";
  if (image.find("heterotune/worker-") == 0) return "hpo-worker";
  return "";
}

class DockerConfigTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    flags_ = new std::map<std::string, std::set<std::string>>();
    (*flags_)["hpo-server"] = HelpFlags(HPO_SERVER_BIN);
#ifdef HPO_WORKER_BIN
    (*flags_)["hpo-worker"] = HelpFlags(HPO_WORKER_BIN);
#endif
  }
  static void TearDownTestSuite() { delete flags_; }

  // Every --flag in `args` is one the image's binary accepts.
  void ExpectKnownFlags(const std::string& where, const std::string& image,
                        const std::vector<std::string>& args) {
    const std::string binary = BinaryOf(image);
    if (binary.empty()) return;  // postgres, prometheus: not ours
    auto it = flags_->find(binary);
    if (it == flags_->end()) return;  // built without the worker
    ASSERT_FALSE(it->second.empty()) << binary << " --help printed no flags";
    for (const auto& a : args) {
      if (a.rfind("--", 0) != 0) continue;
      const std::string flag = a.substr(0, a.find('='));
      EXPECT_TRUE(it->second.count(flag)) << where << ": " << binary << " has no flag " << flag;
    }
  }

  static YAML::Node Compose() { return YAML::LoadFile((kDocker / "compose.yaml").string()); }
  // Every document of every manifest in docker/k8s/ but the kustomization.
  static std::vector<YAML::Node> Manifests() {
    std::vector<YAML::Node> out;
    for (const auto& f : fs::directory_iterator(kDocker / "k8s")) {
      if (f.path().extension() != ".yaml" || f.path().filename() == "kustomization.yaml") continue;
      for (const auto& doc : YAML::LoadAllFromFile(f.path().string())) {
        if (doc && !doc.IsNull()) out.push_back(doc);
      }
    }
    return out;
  }
  static std::vector<YAML::Node> OfKind(const std::string& kind) {
    std::vector<YAML::Node> out;
    for (const auto& d : Manifests()) {
      if (d["kind"].as<std::string>() == kind) out.push_back(d);
    }
    return out;
  }

  static std::map<std::string, std::set<std::string>>* flags_;
};
std::map<std::string, std::set<std::string>>* DockerConfigTest::flags_ = nullptr;

TEST_F(DockerConfigTest, EveryYamlFileParses) {
  int files = 0;
  for (const auto& f : fs::recursive_directory_iterator(kDocker)) {
    const auto ext = f.path().extension();
    if (ext != ".yaml" && ext != ".yml") continue;
    ++files;
    try {
      const auto docs = YAML::LoadAllFromFile(f.path().string());
      EXPECT_FALSE(docs.empty()) << f.path();
    } catch (const YAML::Exception& e) {
      ADD_FAILURE() << f.path() << ": " << e.what();
    }
  }
  EXPECT_GE(files, 8) << "compose.yaml, prometheus.yml and the k8s manifests";
}

// Dockerfile instructions with their continuation lines joined.
std::vector<std::string> Instructions(const fs::path& path) {
  std::vector<std::string> out;
  std::istringstream in(ReadFile(path));
  std::string current;
  for (std::string line; std::getline(in, line);) {
    const auto first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    current += line.substr(first);
    if (!current.empty() && current.back() == '\\') {
      current.pop_back();
      current += ' ';
      continue;
    }
    out.push_back(current);
    current.clear();
  }
  return out;
}

std::vector<std::string> Words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

TEST_F(DockerConfigTest, DockerfilesCopyWhatExistsAndRunTheRepositoryScripts) {
  for (const char* name :
       {"server.Dockerfile", "worker-cpu.Dockerfile", "worker-cuda.Dockerfile"}) {
    SCOPED_TRACE(name);
    const auto instructions = Instructions(kDocker / name);
    ASSERT_FALSE(instructions.empty());
    std::set<std::string> stages;
    std::string user;
    int from = 0;
    bool setup_deps = false, setup_build = false;
    for (const auto& ins : instructions) {
      const auto w = Words(ins);
      if (w[0] == "FROM") {
        ++from;
        user.clear();
        if (w.size() >= 4 && w[2] == "AS") stages.insert(w[3]);
      } else if (w[0] == "USER") {
        user = w[1];
      } else if (w[0] == "COPY") {
        size_t i = 1;
        bool from_stage = false;
        for (; i < w.size() && w[i].rfind("--", 0) == 0; ++i) {
          if (w[i].rfind("--from=", 0) == 0) {
            from_stage = true;
            EXPECT_TRUE(stages.count(w[i].substr(7)))
                << ins << ": no earlier stage " << w[i].substr(7);
          }
        }
        ASSERT_GE(w.size(), i + 2) << ins;
        if (from_stage) continue;  // paths inside an earlier stage
        for (size_t k = i; k + 1 < w.size(); ++k) {
          EXPECT_TRUE(fs::exists(kRoot / w[k]))
              << ins << ": " << w[k] << " is not in the repository";
        }
      } else if (w[0] == "RUN") {
        for (const auto& word : w) {
          if (word.rfind("scripts/", 0) == 0) {
            const fs::path script = kRoot / word;
            EXPECT_TRUE(fs::exists(script) && (fs::status(script).permissions() &
                                               fs::perms::owner_exec) != fs::perms::none)
                << ins << ": " << word << " is not an executable script in the repository";
          }
        }
        if (ins.find("scripts/setup --deps-only") != std::string::npos) setup_deps = true;
        if (ins.find("scripts/setup --no-deps") != std::string::npos) setup_build = true;
      }
    }
    EXPECT_GE(from, 2) << "multi-stage: a build stage and a slim runtime stage";
    EXPECT_FALSE(user.empty() || user == "root" || user == "0")
        << "the runtime stage runs as a non-root USER";
    EXPECT_TRUE(setup_deps && setup_build)
        << "packages and the build come from scripts/setup, as in CI";
  }
  const std::string server = ReadFile(kDocker / "server.Dockerfile");
  EXPECT_NE(server.find("HEALTHCHECK"), std::string::npos);
  EXPECT_NE(server.find("/healthz"), std::string::npos);
  EXPECT_NE(server.find("EXPOSE 8080 50051"), std::string::npos);
  // The CPU worker carries the libraries hpo-worker loads (scripts/runtime-libs,
  // found through a DT_RPATH naming where they are), checked in the image.
  const std::string cpu = ReadFile(kDocker / "worker-cpu.Dockerfile");
  EXPECT_NE(cpu.find("scripts/runtime-libs /opt/heterotune/lib build/worker/hpo-worker"),
            std::string::npos);
  EXPECT_NE(cpu.find("--disable-new-dtags,-rpath,/opt/heterotune/lib"), std::string::npos)
      << "a DT_RUNPATH would be searched for hpo-worker's own libraries only, not theirs";
  EXPECT_NE(cpu.find("ldd /usr/local/bin/hpo-worker"), std::string::npos);
  EXPECT_NE(ReadFile(kDocker / "worker-cuda.Dockerfile").find("torch.utils.cmake_prefix_path"),
            std::string::npos);
  // examples/command.yaml runs examples/train_example.py, which imports the
  // Python client from ../clients/python beside itself: both images carry
  // both, at those places under the workers' working directory.
  for (const char* name : {"worker-cpu.Dockerfile", "worker-cuda.Dockerfile"}) {
    SCOPED_TRACE(name);
    const std::string worker = ReadFile(kDocker / name);
    EXPECT_NE(worker.find("WORKDIR /opt/heterotune"), std::string::npos);
    EXPECT_NE(worker.find("COPY examples/train_example.py /opt/heterotune/examples/"),
              std::string::npos);
    EXPECT_NE(
        worker.find("COPY clients/python/heterotune/ /opt/heterotune/clients/python/heterotune/"),
        std::string::npos)
        << "train_example.py exits at once without the heterotune package";
  }
  EXPECT_NE(ReadFile(kRoot / "examples/train_example.py").find("\"clients\", \"python\""),
            std::string::npos)
      << "train_example.py no longer looks for the client where the images put it";
}

TEST_F(DockerConfigTest, ComposeReferencesWhatItDefinesAndTheBinariesFlags) {
  const YAML::Node compose = Compose();
  const YAML::Node services = compose["services"];
  ASSERT_TRUE(services && services.IsMap());
  std::set<std::string> volumes, networks, names;
  for (const auto& v : compose["volumes"]) volumes.insert(v.first.as<std::string>());
  for (const auto& n : compose["networks"]) networks.insert(n.first.as<std::string>());
  for (const auto& s : services) names.insert(s.first.as<std::string>());
  for (const char* want :
       {"postgres", "server", "worker-cpu-1", "worker-cpu-2", "worker-gpu", "prometheus"}) {
    EXPECT_TRUE(names.count(want)) << "service " << want;
  }

  for (const auto& s : services) {
    const std::string name = s.first.as<std::string>();
    const YAML::Node svc = s.second;
    SCOPED_TRACE("service " + name);
    ASSERT_TRUE(svc["image"])
        << "every service names its image (the k8s manifests use the same names)";
    if (const auto build = svc["build"]) {
      const fs::path context = kDocker / build["context"].as<std::string>();
      EXPECT_TRUE(fs::is_directory(context)) << context;
      EXPECT_TRUE(fs::exists(context / build["dockerfile"].as<std::string>()))
          << build["dockerfile"];
    }
    for (const auto& v : Strings(svc["volumes"])) {
      const std::string source = v.substr(0, v.find(':'));
      if (source.rfind("./", 0) == 0 || source.rfind("../", 0) == 0 || source[0] == '/') {
        EXPECT_TRUE(fs::exists(kDocker / source)) << "bind mount " << source;
      } else {
        EXPECT_TRUE(volumes.count(source)) << "volume " << source << " is not defined";
      }
    }
    for (const auto& n : Strings(svc["networks"]))
      EXPECT_TRUE(networks.count(n)) << "network " << n;
    if (const auto deps = svc["depends_on"]) {
      // A list of names, or a map of name -> {condition: ...}.
      std::vector<std::pair<std::string, std::string>> on;
      for (const auto& d : deps) {
        if (deps.IsSequence()) {
          on.emplace_back(d.as<std::string>(), "");
        } else {
          on.emplace_back(d.first.as<std::string>(), d.second["condition"].as<std::string>(""));
        }
      }
      for (const auto& [dep, condition] : on) {
        ASSERT_TRUE(names.count(dep)) << "depends_on " << dep;
        if (condition != "service_healthy") continue;
        const YAML::Node target = services[dep];
        // The server image has a HEALTHCHECK of its own.
        const bool has_check =
            target["healthcheck"] || BinaryOf(target["image"].as<std::string>()) == "hpo-server";
        EXPECT_TRUE(has_check) << dep << " has no healthcheck to wait for";
      }
    }
    const std::string image = svc["image"].as<std::string>();
    ExpectKnownFlags("compose service " + name, image, Strings(svc["command"]));
  }

  // The server: PostgreSQL once it is healthy, and the published ports are
  // the ones its flags listen on.
  const YAML::Node server = services["server"];
  const auto args = Strings(server["command"]);
  const auto store = std::find(args.begin(), args.end(), "--store");
  ASSERT_NE(store, args.end());
  EXPECT_EQ(store[1].rfind("postgresql://", 0), 0u) << store[1];
  EXPECT_NE(store[1].find("@postgres:5432/"), std::string::npos) << store[1];
  EXPECT_EQ(server["depends_on"]["postgres"]["condition"].as<std::string>(), "service_healthy");
  std::set<int> published;
  for (const auto& p : Strings(server["ports"]))
    published.insert(std::stoi(p.substr(p.rfind(':') + 1)));
  EXPECT_TRUE(published.count(PortAfter(args, "--http"))) << "--http port is published";
  EXPECT_TRUE(published.count(PortAfter(args, "--grpc"))) << "--grpc port is published";
  // Workers reach the server's gRPC port by its service name.
  for (const char* w : {"worker-cpu-1", "worker-cpu-2", "worker-gpu"}) {
    EXPECT_EQ(PortAfter(Strings(services[w]["command"]), "--server"), PortAfter(args, "--grpc"))
        << w;
    EXPECT_EQ(Strings(services[w]["command"]).at(1).substr(0, 7), "server:") << w;
  }
  EXPECT_EQ(services["worker-cpu-1"]["cpus"].as<double>(), 1.0);
  EXPECT_EQ(services["worker-cpu-2"]["cpus"].as<double>(), 0.5);
  const YAML::Node gpu = services["worker-gpu"];
  EXPECT_EQ(Strings(gpu["profiles"]), std::vector<std::string>{"gpu"});
  EXPECT_EQ(gpu["deploy"]["resources"]["reservations"]["devices"][0]["driver"].as<std::string>(),
            "nvidia");

  // Prometheus scrapes the server service on its --http port.
  const YAML::Node prom = YAML::LoadFile((kDocker / "prometheus.yml").string());
  const YAML::Node sd = prom["scrape_configs"][0]["dns_sd_configs"][0];
  EXPECT_EQ(Strings(sd["names"]), std::vector<std::string>{"server"});
  EXPECT_EQ(sd["port"].as<int>(), PortAfter(args, "--http"));
  EXPECT_EQ(prom["scrape_configs"][0]["metrics_path"].as<std::string>(), "/metrics");
}

TEST_F(DockerConfigTest, KubernetesManifestsReferenceWhatExists) {
  const YAML::Node compose = Compose();
  std::set<std::string> compose_images;
  for (const auto& s : compose["services"])
    compose_images.insert(s.second["image"].as<std::string>());

  std::map<std::string, std::set<std::string>> secret_keys;
  for (const auto& s : OfKind("Secret")) {
    for (const auto& kv : s["stringData"])
      secret_keys[s["metadata"]["name"].as<std::string>()].insert(kv.first.as<std::string>());
  }
  // name -> (pod labels, container port names -> numbers)
  struct Workload {
    YAML::Node pod;
    std::map<std::string, std::string> labels;
    std::map<std::string, int> ports;
  };
  std::map<std::string, Workload> workloads;
  for (const char* kind : {"Deployment", "StatefulSet"}) {
    for (const auto& d : OfKind(kind)) {
      const std::string name = d["metadata"]["name"].as<std::string>();
      SCOPED_TRACE(std::string(kind) + " " + name);
      Workload w;
      w.pod = d["spec"]["template"];
      for (const auto& l : w.pod["metadata"]["labels"])
        w.labels[l.first.as<std::string>()] = l.second.as<std::string>();
      for (const auto& l : d["spec"]["selector"]["matchLabels"]) {
        EXPECT_EQ(w.labels[l.first.as<std::string>()], l.second.as<std::string>())
            << "selector matches the pod";
      }
      for (const auto& c : w.pod["spec"]["containers"]) {
        const std::string image = c["image"].as<std::string>();
        EXPECT_TRUE(compose_images.count(image))
            << image << " is not an image compose builds or uses";
        std::vector<std::string> args = Strings(c["args"]);
        ExpectKnownFlags(std::string(kind) + " " + name, image, args);
        for (const auto& p : c["ports"]) {
          if (p["name"]) w.ports[p["name"].as<std::string>()] = p["containerPort"].as<int>();
        }
        if (BinaryOf(image) == "hpo-server") {
          EXPECT_EQ(w.ports["http"], PortAfter(args, "--http"));
          EXPECT_EQ(w.ports["grpc"], PortAfter(args, "--grpc"));
        }
        for (const char* probe : {"readinessProbe", "livenessProbe"}) {
          if (!c[probe]) continue;
          if (const auto get = c[probe]["httpGet"]) {
            const auto port = get["port"];
            EXPECT_TRUE(w.ports.count(port.as<std::string>())) << probe << " port " << port;
          }
        }
        for (const auto& e : c["env"]) {
          if (!e["valueFrom"]) continue;
          if (const auto ref = e["valueFrom"]["secretKeyRef"]) {
            const std::string secret = ref["name"].as<std::string>();
            EXPECT_TRUE(secret_keys[secret].count(ref["key"].as<std::string>()))
                << "env " << e["name"] << ": Secret " << secret << " has no key " << ref["key"];
          }
        }
      }
      workloads[name] = w;
    }
  }

  // The server: 2 replicas, probes on /readyz and /healthz, scraped by
  // annotation on its http port.
  ASSERT_TRUE(workloads.count("hpo-server"));
  for (const auto& d : OfKind("Deployment")) {
    if (d["metadata"]["name"].as<std::string>() != "hpo-server") continue;
    EXPECT_EQ(d["spec"]["replicas"].as<int>(), 2);
    const auto c = d["spec"]["template"]["spec"]["containers"][0];
    EXPECT_EQ(c["readinessProbe"]["httpGet"]["path"].as<std::string>(), "/readyz");
    EXPECT_EQ(c["livenessProbe"]["httpGet"]["path"].as<std::string>(), "/healthz");
    const auto annotations = d["spec"]["template"]["metadata"]["annotations"];
    EXPECT_EQ(annotations["prometheus.io/scrape"].as<std::string>(), "true");
    EXPECT_EQ(annotations["prometheus.io/port"].as<int>(), workloads["hpo-server"].ports["http"]);
  }
  // Workers: a CPU pool and a GPU pool, each on its nodes, the GPU one
  // with a GPU limit; both reach the server's Service on its gRPC port.
  ASSERT_TRUE(workloads.count("hpo-worker-cpu") && workloads.count("hpo-worker-gpu"));
  EXPECT_EQ(workloads["hpo-worker-cpu"]
                .pod["spec"]["nodeSelector"]["heterotune.io/pool"]
                .as<std::string>(),
            "cpu");
  const auto gpu_pod = workloads["hpo-worker-gpu"].pod["spec"];
  EXPECT_EQ(gpu_pod["nodeSelector"]["heterotune.io/pool"].as<std::string>(), "gpu");
  EXPECT_EQ(gpu_pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"].as<int>(), 1);

  // Services select a workload and target its named ports.
  std::map<std::string, std::map<std::string, int>> service_ports;
  for (const auto& s : OfKind("Service")) {
    const std::string name = s["metadata"]["name"].as<std::string>();
    SCOPED_TRACE("Service " + name);
    const Workload* target = nullptr;
    for (const auto& [wname, w] : workloads) {
      bool all = true;
      for (const auto& l : s["spec"]["selector"]) {
        auto it = w.labels.find(l.first.as<std::string>());
        all = all && it != w.labels.end() && it->second == l.second.as<std::string>();
      }
      if (all) target = &w;
    }
    ASSERT_NE(target, nullptr) << "selects no Deployment or StatefulSet";
    for (const auto& p : s["spec"]["ports"]) {
      const std::string port_name = p["targetPort"].as<std::string>();
      ASSERT_TRUE(target->ports.count(port_name)) << "targetPort " << port_name;
      service_ports[name][p["name"].as<std::string>()] = p["port"].as<int>();
    }
  }
  for (const char* w : {"hpo-worker-cpu", "hpo-worker-gpu"}) {
    const auto args = Strings(workloads[w].pod["spec"]["containers"][0]["args"]);
    const auto server = std::find(args.begin(), args.end(), "--server");
    ASSERT_NE(server, args.end()) << w;
    const std::string host = server[1].substr(0, server[1].rfind(':'));
    ASSERT_TRUE(service_ports.count(host)) << w << ": no Service " << host;
    EXPECT_EQ(service_ports[host]["grpc"], PortAfter(args, "--server")) << w;
  }
  // The store URL in the Secret names the PostgreSQL Service and port.
  for (const auto& s : OfKind("Secret")) {
    const std::string url = s["stringData"]["HPO_STORE"].as<std::string>("");
    if (url.empty()) continue;
    EXPECT_EQ(url.rfind("postgresql://", 0), 0u);
    EXPECT_NE(url.find("@postgres:" + std::to_string(service_ports["postgres"]["postgres"]) + "/"),
              std::string::npos)
        << url;
  }

  // kustomization.yaml lists files that exist and images that are used.
  const YAML::Node k = YAML::LoadFile((kDocker / "k8s" / "kustomization.yaml").string());
  for (const auto& r : Strings(k["resources"])) EXPECT_TRUE(fs::exists(kDocker / "k8s" / r)) << r;
  for (const auto& i : k["images"]) {
    EXPECT_TRUE(compose_images.count(i["name"].as<std::string>() + ":latest")) << i["name"];
  }
}

}  // namespace
}  // namespace hpo
