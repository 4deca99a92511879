// The worker's CPU inventory, on sample filesystem trees under
// testdata/cgroup/ (one per cgroup layout) and on the real machine.
#include "worker/inventory.h"

#include <gtest/gtest.h>

#include <iostream>
#include <string>

namespace hpo::worker {
namespace {

std::string Tree(const std::string& name) { return std::string(HPO_TESTDATA) + "/cgroup/" + name; }

constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kSampleMemTotal = 16 * kGiB;  // MemTotal in every sample tree

// Reads a sample tree with a fixed affinity (8 CPUs, above every sample
// quota) so the results do not depend on the machine running the test.
CpuInventory ReadTree(const std::string& name, int affinity_cpus = 8) {
  Result<CpuInventory> inventory = ReadCpuInventory(Tree(name), affinity_cpus);
  EXPECT_TRUE(inventory.ok()) << inventory.status();
  return inventory.ok() ? *inventory : CpuInventory{};
}

// ---- Parsers ----

TEST(ParseCpuMaxTest, QuotaOverPeriod) {
  EXPECT_EQ(ParseCpuMax("50000 100000\n"), 0.5);
  EXPECT_EQ(ParseCpuMax("150000 100000"), 1.5);
  EXPECT_EQ(ParseCpuMax("200000 50000\n"), 4.0);
}

TEST(ParseCpuMaxTest, MaxMeansNoLimit) { EXPECT_EQ(ParseCpuMax("max 100000\n"), std::nullopt); }

TEST(ParseCpuMaxTest, BadContentMeansNoLimit) {
  for (const char* text : {"", "\n", "50000", "abc 100000", "50000 0", "0 100000", "-5 100000",
                           "50000 100000 7", "50000x 100000"}) {
    EXPECT_EQ(ParseCpuMax(text), std::nullopt) << '"' << text << '"';
  }
}

TEST(ParseCfsQuotaTest, QuotaOverPeriod) {
  EXPECT_EQ(ParseCfsQuota("50000\n", "100000\n"), 0.5);
  EXPECT_EQ(ParseCfsQuota("250000", "100000"), 2.5);
}

TEST(ParseCfsQuotaTest, MinusOneMeansNoLimit) {
  EXPECT_EQ(ParseCfsQuota("-1\n", "100000\n"), std::nullopt);
}

TEST(ParseCfsQuotaTest, BadContentMeansNoLimit) {
  EXPECT_EQ(ParseCfsQuota("", "100000"), std::nullopt);
  EXPECT_EQ(ParseCfsQuota("50000", ""), std::nullopt);
  EXPECT_EQ(ParseCfsQuota("50000", "0"), std::nullopt);
  EXPECT_EQ(ParseCfsQuota("lots", "100000"), std::nullopt);
}

TEST(ParseProcSelfCgroupTest, V2Only) {
  ProcSelfCgroup cgroups = ParseProcSelfCgroup("0::/user.slice/session-3.scope\n");
  EXPECT_EQ(cgroups.v2, "/user.slice/session-3.scope");
  EXPECT_EQ(cgroups.v1_cpu, std::nullopt);
  EXPECT_EQ(cgroups.v1_memory, std::nullopt);
}

TEST(ParseProcSelfCgroupTest, V1AndHybrid) {
  ProcSelfCgroup cgroups = ParseProcSelfCgroup(
      "12:cpuset:/a\n"
      "11:cpuacct:/b\n"
      "5:cpu,cpuacct:/job\n"
      "4:memory:/mem/job\n"
      "1:name=systemd:/sys\n"
      "0::/unified");
  EXPECT_EQ(cgroups.v1_cpu, "/job");  // not cpuset's or cpuacct's line
  EXPECT_EQ(cgroups.v1_memory, "/mem/job");
  EXPECT_EQ(cgroups.v2, "/unified");
}

TEST(ParseProcSelfCgroupTest, PathMayHoldColonsAndBadLinesAreSkipped) {
  ProcSelfCgroup cgroups = ParseProcSelfCgroup("garbage\n3:cpu:\n2:cpu:/a:b\n\n0::/\n");
  EXPECT_EQ(cgroups.v1_cpu, "/a:b");
  EXPECT_EQ(cgroups.v2, "/");
  EXPECT_EQ(cgroups.v1_memory, std::nullopt);
}

TEST(ParseProcSelfCgroupTest, EmptyText) {
  ProcSelfCgroup cgroups = ParseProcSelfCgroup("");
  EXPECT_EQ(cgroups.v2, std::nullopt);
  EXPECT_EQ(cgroups.v1_cpu, std::nullopt);
  EXPECT_EQ(cgroups.v1_memory, std::nullopt);
}

TEST(ParseCpuinfoModelTest, FirstModelNameWithBlanksCollapsed) {
  EXPECT_EQ(ParseCpuinfoModel("processor\t: 0\n"
                              "model name\t: Intel(R) Xeon(R) CPU   E5-2680 v4 @ 2.40GHz  \n"
                              "processor\t: 1\n"
                              "model name\t: Something Else\n"),
            "Intel(R) Xeon(R) CPU E5-2680 v4 @ 2.40GHz");
}

TEST(ParseCpuinfoModelTest, Fallbacks) {
  // Older ARM kernels: no "model name", the board in "Hardware".
  EXPECT_EQ(ParseCpuinfoModel("processor\t: 0\nHardware\t: BCM2835\n"), "BCM2835");
  // "model name" wins over "Hardware" wherever it appears.
  EXPECT_EQ(ParseCpuinfoModel("Hardware\t: BCM2835\nmodel name\t: ARMv7 rev 4\n"), "ARMv7 rev 4");
  // MIPS.
  EXPECT_EQ(ParseCpuinfoModel("system type\t: x\ncpu model\t: MIPS 24Kc V7.4\n"), "MIPS 24Kc V7.4");
  // An empty value does not count.
  EXPECT_EQ(ParseCpuinfoModel("model name\t:\nHardware\t: BCM2835\n"), "BCM2835");
  EXPECT_EQ(ParseCpuinfoModel(""), "unknown cpu");
  EXPECT_EQ(ParseCpuinfoModel("flags: fpu vme\n"), "unknown cpu");
}

TEST(CountCpuinfoProcessorsTest, CountsProcessorEntries) {
  EXPECT_EQ(CountCpuinfoProcessors("processor\t: 0\nmodel name : x\n\nprocessor\t: 1\n"), 2);
  EXPECT_EQ(CountCpuinfoProcessors(""), 0);
}

TEST(ParseMeminfoTotalTest, KibToBytes) {
  Result<int64_t> total = ParseMeminfoTotal("MemTotal:       24683620 kB\nMemFree: 1 kB\n");
  ASSERT_TRUE(total.ok()) << total.status();
  EXPECT_EQ(*total, int64_t{24683620} * 1024);
  // Not necessarily the first line.
  total = ParseMeminfoTotal("Other: 3 kB\nMemTotal: 2 kB");
  ASSERT_TRUE(total.ok()) << total.status();
  EXPECT_EQ(*total, 2048);
}

TEST(ParseMeminfoTotalTest, BadContentIsInvalidArgument) {
  for (const char* text :
       {"", "MemFree: 1 kB\n", "MemTotal: lots kB\n", "MemTotal: 12\n", "MemTotal: 12 MB\n",
        "MemTotal: 0 kB\n", "MemTotal: -4 kB\n", "MemTotal: 99999999999999999999 kB\n"}) {
    Result<int64_t> total = ParseMeminfoTotal(text);
    EXPECT_TRUE(total.status().IsInvalidArgument()) << '"' << text << "\": " << total.status();
  }
}

// ---- Usable cores and the device class ----

TEST(UsableCoresTest, MinOfAffinityAndQuota) {
  EXPECT_EQ(UsableCores(4, std::nullopt), 4.0);
  EXPECT_EQ(UsableCores(4, 0.5), 0.5);
  EXPECT_EQ(UsableCores(4, 6.0), 4.0);
  EXPECT_EQ(UsableCores(2, 2.0), 2.0);
}

TEST(CpuDeviceClassTest, ModelAndCoresWithOneDecimal) {
  CpuInventory inventory;
  inventory.model = "AMD EPYC 7B13";
  inventory.usable_cores = 2;
  EXPECT_EQ(CpuDeviceClass(inventory), "cpu:AMD EPYC 7B13:x2.0");
  inventory.usable_cores = 0.5;
  EXPECT_EQ(CpuDeviceClass(inventory), "cpu:AMD EPYC 7B13:x0.5");
  inventory.usable_cores = 1.25;  // exactly representable: rounds to even
  EXPECT_EQ(CpuDeviceClass(inventory), "cpu:AMD EPYC 7B13:x1.2");
  inventory.usable_cores = 1.0 / 3;
  EXPECT_EQ(CpuDeviceClass(inventory), "cpu:AMD EPYC 7B13:x0.3");
}

// ---- Sample trees ----

TEST(ReadCpuInventoryTest, V1Quota) {
  CpuInventory inventory = ReadTree("v1_quota");
  EXPECT_EQ(inventory.model, "Intel(R) Xeon(R) CPU E5-2680 v4 @ 2.40GHz");
  EXPECT_EQ(inventory.logical_cpus, 4);
  EXPECT_EQ(inventory.affinity_cpus, 8);
  EXPECT_EQ(inventory.quota_cpus, 0.5);
  EXPECT_EQ(inventory.usable_cores, 0.5);
  EXPECT_EQ(inventory.memory_limit_bytes, kGiB);
  EXPECT_EQ(inventory.memory_bytes, kGiB);
  EXPECT_EQ(CpuDeviceClass(inventory), "cpu:Intel(R) Xeon(R) CPU E5-2680 v4 @ 2.40GHz:x0.5");
}

TEST(ReadCpuInventoryTest, V1NoQuota) {
  CpuInventory inventory = ReadTree("v1_no_quota");
  EXPECT_EQ(inventory.quota_cpus, std::nullopt);
  EXPECT_EQ(inventory.usable_cores, 8.0);
  EXPECT_EQ(inventory.memory_limit_bytes, std::nullopt);  // the huge "unlimited" value
  EXPECT_EQ(inventory.memory_bytes, kSampleMemTotal);
}

TEST(ReadCpuInventoryTest, V1ContainerFallsBackToTheMountRoot) {
  CpuInventory inventory = ReadTree("v1_container");
  EXPECT_EQ(inventory.quota_cpus, 0.25);
  EXPECT_EQ(inventory.usable_cores, 0.25);
  EXPECT_EQ(inventory.memory_limit_bytes, 512 * (int64_t{1} << 20));
  EXPECT_EQ(inventory.memory_bytes, 512 * (int64_t{1} << 20));
}

TEST(ReadCpuInventoryTest, V2Quota) {
  CpuInventory inventory = ReadTree("v2_quota");
  EXPECT_EQ(inventory.quota_cpus, 1.5);
  EXPECT_EQ(inventory.usable_cores, 1.5);
  // The child has "max", its parent 2 GiB: the parent's applies.
  EXPECT_EQ(inventory.memory_limit_bytes, 2 * kGiB);
  EXPECT_EQ(inventory.memory_bytes, 2 * kGiB);
}

TEST(ReadCpuInventoryTest, V2NoQuota) {
  CpuInventory inventory = ReadTree("v2_no_quota");
  EXPECT_EQ(inventory.quota_cpus, std::nullopt);
  EXPECT_EQ(inventory.usable_cores, 8.0);
  EXPECT_EQ(inventory.memory_limit_bytes, std::nullopt);
  EXPECT_EQ(inventory.memory_bytes, kSampleMemTotal);
}

TEST(ReadCpuInventoryTest, V2ParentTighterThanChildWins) {
  CpuInventory inventory = ReadTree("v2_parent_tighter");
  EXPECT_EQ(inventory.quota_cpus, 0.75);  // parent 0.75, child 4.0
  EXPECT_EQ(inventory.usable_cores, 0.75);
  EXPECT_EQ(inventory.memory_limit_bytes, kGiB);  // parent 1 GiB, child 4 GiB
  EXPECT_EQ(inventory.memory_bytes, kGiB);
}

TEST(ReadCpuInventoryTest, V2ContainerFallsBackToTheMountRoot) {
  CpuInventory inventory = ReadTree("v2_container");
  EXPECT_EQ(inventory.quota_cpus, 2.0);
  EXPECT_EQ(inventory.usable_cores, 2.0);
  EXPECT_EQ(inventory.memory_limit_bytes, 768 * (int64_t{1} << 20));
}

TEST(ReadCpuInventoryTest, NoCgroupFilesMeansNoLimits) {
  CpuInventory inventory = ReadTree("no_cgroup");
  EXPECT_EQ(inventory.model, "BCM2835");
  EXPECT_EQ(inventory.logical_cpus, 2);
  EXPECT_EQ(inventory.quota_cpus, std::nullopt);
  EXPECT_EQ(inventory.usable_cores, 8.0);
  EXPECT_EQ(inventory.memory_limit_bytes, std::nullopt);
  EXPECT_EQ(inventory.memory_bytes, kSampleMemTotal);
}

TEST(ReadCpuInventoryTest, UsableCoresIsTheMinOfAffinityAndQuota) {
  // v2_quota has a 1.5-CPU quota: fewer CPUs in the mask win over it.
  EXPECT_EQ(ReadTree("v2_quota", 1).usable_cores, 1.0);
  EXPECT_EQ(ReadTree("v2_quota", 2).usable_cores, 1.5);
  EXPECT_EQ(ReadTree("v2_no_quota", 3).usable_cores, 3.0);
}

TEST(ReadCpuInventoryTest, MissingMeminfoIsNotFound) {
  Result<CpuInventory> inventory = ReadCpuInventory(Tree("does_not_exist"), 1);
  EXPECT_TRUE(inventory.status().IsNotFound()) << inventory.status();
}

TEST(ReadCpuInventoryTest, BadAffinityOverrideIsInvalidArgument) {
  EXPECT_TRUE(ReadCpuInventory(Tree("v2_quota"), 0).status().IsInvalidArgument());
}

TEST(ReadCpuInventoryTest, RealMachine) {
  Result<CpuInventory> inventory = ReadCpuInventory("/");
  ASSERT_TRUE(inventory.ok()) << inventory.status();
  EXPECT_NE(inventory->model, "");
  EXPECT_GE(inventory->affinity_cpus, 1);
  EXPECT_GE(inventory->logical_cpus, 1);
  EXPECT_GT(inventory->usable_cores, 0);
  EXPECT_LE(inventory->usable_cores, inventory->affinity_cpus);
  EXPECT_GT(inventory->memory_bytes, 0);
  if (inventory->memory_limit_bytes) {
    EXPECT_LE(inventory->memory_bytes, *inventory->memory_limit_bytes);
  }
  // Printed to make the machine's own view visible in the test log.
  std::cout << "[ inventory ] " << CpuDeviceClass(*inventory) << ", " << inventory->logical_cpus
            << " logical, " << inventory->affinity_cpus << " in affinity, quota "
            << (inventory->quota_cpus ? std::to_string(*inventory->quota_cpus) : "none") << ", "
            << inventory->memory_bytes << " bytes\n";
}

}  // namespace
}  // namespace hpo::worker
