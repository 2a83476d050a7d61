// A list of immutable records that grows but never shrinks: the built-in ones first (a table's),
// then the ones added later (tests register toys). What the strategy registry
// (planner/strategy/strategy_registry.h) and the architecture registry
// (planner/skeleton/hf/architecture_registry.h) keep their records in.
//
//   RecordRegistry<Strategy>& Registry() {
//     static auto* const registry = new RecordRegistry<Strategy>({&kLayersStrategy, &kTpStrategy});
//     return *registry;  // never destroyed: records are read until the process ends
//   }
//   const Strategy* tp = Registry().Find([](const Strategy& s) { return s.name == "tp"; });
//
// Thread-safety: every member may be called from any thread. Records are never copied: they
// must outlive the registry (statics).
#ifndef METALOAD_PLANNER_RECORD_REGISTRY_H_
#define METALOAD_PLANNER_RECORD_REGISTRY_H_

#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

// For tables written as X-macros (strategies/strategy_table.h): `&record,` for each line.
#define METALOAD_RECORD_ADDRESS(record) &record,

namespace metaload {

template <typename Record>
class RecordRegistry {
 public:
  explicit RecordRegistry(std::vector<const Record*> built_in) : records_(std::move(built_in)) {}

  // Every record, built-in ones first, then in the order they were added.
  std::vector<const Record*> All() const {
    absl::ReaderMutexLock lock(&mu_);
    return records_;
  }

  // `visit(records)`'s result, called with every record while none can be added: for lookups
  // that return a part of a record.
  template <typename Visitor>
  auto Visit(Visitor visit) const {
    absl::ReaderMutexLock lock(&mu_);
    return visit(static_cast<const std::vector<const Record*>&>(records_));
  }

  // The first record for which `matches` holds; nullptr when none does.
  template <typename Matches>
  const Record* Find(Matches matches) const {
    return Visit([&](const std::vector<const Record*>& records) -> const Record* {
      for (const Record* record : records) {
        if (matches(*record)) return record;
      }
      return nullptr;
    });
  }

  // Adds `record` when `check(records)` is OK (it says why not, e.g. a name taken), checked and
  // added at once, so that two records racing cannot both pass.
  // REQUIRES: `record` outlives the registry.
  template <typename Check>
  absl::Status Add(const Record& record, Check check) {
    absl::MutexLock lock(&mu_);
    absl::Status status = check(static_cast<const std::vector<const Record*>&>(records_));
    if (status.ok()) records_.push_back(&record);
    return status;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<const Record*> records_ ABSL_GUARDED_BY(mu_);
};

}  // namespace metaload

#endif  // METALOAD_PLANNER_RECORD_REGISTRY_H_
