// metaload._native: the client library (libmetaload.so) for Python. Thin: every decision is
// made in C++ (client/resolve/materialize.h, client/load/rank_loader.h) or in the Python package;
// this file converts arguments, releases the GIL while bytes move, turns Ctrl-C into a cancelled
// load, and raises the package's exceptions (metaload/_errors.py) for failed statuses.
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>  // at::Tensor <-> torch.Tensor

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/load/device.h"
#include "client/load/rank_loader.h"
#include "client/resolve/materialize.h"
#include "planner/format/dtype.h"
#include "planner/skeleton/hf/architecture_registry.h"
#include "security/client_credentials.h"
#include "util/error_kind.h"

namespace py = pybind11;

namespace metaload {
namespace {

[[noreturn]] void Raise(const absl::Status& status) {
  py::object error_class = py::module_::import("metaload._errors").attr(PythonExceptionOf(KindOf(status)));
  PyErr_SetObject(error_class.ptr(), py::str(std::string(status.message())).ptr());
  throw py::error_already_set();
}

template <typename T>
T OrRaise(absl::StatusOr<T> result) {
  if (!result.ok()) Raise(result.status());
  return *std::move(result);
}

// Runs `work` on a thread of its own while this one, without the GIL, waits; every 100 ms it
// takes the GIL to let Python run its signal handlers. A KeyboardInterrupt cancels the work
// (reads not yet done fail, streams are cancelled), waits for it to stop, and propagates.
template <typename T>
T RunInterruptible(const std::function<absl::StatusOr<T>(const std::atomic<bool>*)>& work) {
  std::atomic<bool> cancelled{false};
  std::optional<absl::StatusOr<T>> result;
  std::mutex mu;
  std::condition_variable done_cv;
  bool done = false;
  std::thread worker([&] {
    absl::StatusOr<T> r = work(&cancelled);
    std::lock_guard<std::mutex> lock(mu);
    result = std::move(r);
    done = true;
    done_cv.notify_all();
  });
  bool interrupted = false;
  while (true) {
    {
      py::gil_scoped_release release;
      std::unique_lock<std::mutex> lock(mu);
      if (done_cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return done; })) break;
    }
    if (!interrupted && PyErr_CheckSignals() != 0) {
      interrupted = true;  // the exception is set; stop the work, then raise it
      cancelled = true;
    }
  }
  worker.join();
  if (interrupted) throw py::error_already_set();
  return OrRaise(*std::move(result));
}

// The knobs a caller passes straight through: bounded here, at the edge, like metactl's flags.
absl::Status CheckKnobs(int read_threads, double timeout_s) {
  if (read_threads < 1 || read_threads > 64) {
    return absl::InvalidArgumentError(absl::StrCat("read_threads ", read_threads, " is outside 1..64"));
  }
  if (!(timeout_s > 0) || timeout_s > 7 * 24 * 3600.0) {
    return absl::InvalidArgumentError(absl::StrCat("timeout_s ", timeout_s, " is not in (0, 604800]"));
  }
  return absl::OkStatus();
}

std::optional<TensorBox> BoxFrom(const std::optional<std::vector<int64_t>>& start,
                                 const std::optional<std::vector<int64_t>>& length) {
  if (!start.has_value() || !length.has_value()) return std::nullopt;
  return TensorBox{*start, *length};
}

// A Provenance's fields (client/read/provenance.h), for metaload._report.Provenance.from_native:
// the package makes the text users see from them, by metactl's rules.
py::dict ProvenanceDict(const Provenance& p) {
  py::dict d;
  d["kind"] = ProvenanceKindName(p.kind);
  d["nodes"] = p.nodes;
  d["converted_to"] =
      p.converted_to.has_value() ? py::object(py::str(std::string(DTypeCode(*p.converted_to)))) : py::none();
  d["rule"] = p.rule;
  d["tied_to"] = p.tied_to;
  return d;
}

py::dict MaterializeBinding(const ModelView& view, const py::list& requests, const std::string& source_text,
                            const std::optional<std::string>& init_missing, int read_threads,
                            double timeout_s, bool check_only) {
  if (absl::Status s = CheckKnobs(read_threads, timeout_s); !s.ok()) Raise(s);
  MaterializeSettings settings;
  settings.check_only = check_only;
  settings.read.source = OrRaise(ParseSource(source_text));
  if (init_missing.has_value()) settings.init_missing = OrRaise(ParseInitPolicy(*init_missing));
  settings.read.read_threads = read_threads;
  settings.read.timeout = absl::Seconds(timeout_s);
  std::vector<MaterializeRequest> converted;
  converted.reserve(requests.size());
  for (const py::handle& item : requests) {
    auto [name, shape, start, length, is_buffer, dest] =
        item.cast<std::tuple<std::string, std::vector<int64_t>, std::optional<std::vector<int64_t>>,
                             std::optional<std::vector<int64_t>>, bool, at::Tensor>>();
    converted.push_back(MaterializeRequest{name, shape, BoxFrom(start, length), is_buffer, dest});
  }
  MaterializeOutcome outcome = RunInterruptible<MaterializeOutcome>([&](const std::atomic<bool>* cancelled) {
    MaterializeSettings s = settings;
    s.read.cancelled = cancelled;
    return Materialize(view, converted, s);
  });
  py::dict out;
  py::list refused, results;
  for (const Finding& f : outcome.refused) refused.append(py::make_tuple(f.tensor, f.why));
  py::list failovers;  // (result index, from, to, at_byte, error): apart, so results keep their shape
  for (size_t i = 0; i < outcome.results.size(); ++i) {
    const MaterializeResult& r = outcome.results[i];
    results.append(py::make_tuple(r.filled, ProvenanceDict(r.provenance), r.error));
    for (const FailoverEvent& e : r.failovers)
      failovers.append(py::make_tuple(i, e.from, e.to, e.at_byte, e.error));
  }
  out["failovers"] = failovers;
  out["refused"] = refused;
  out["summary"] = outcome.summary;
  out["results"] = results;
  out["direct_bytes"] = outcome.direct_bytes;
  out["streamed_bytes"] = outcome.streamed_bytes;
  return out;
}

py::dict LoadedTensorDict(const LoadedTensor& t) {
  py::dict d;
  d["name"] = t.name;
  d["tensor"] = t.tensor;
  d["slice"] = t.slice.has_value() ? py::object(py::make_tuple(t.slice->dim, t.slice->start, t.slice->length))
                                   : py::object(py::none());
  d["full_shape"] = t.full_shape;
  d["filled"] = t.filled;
  d["provenance"] = ProvenanceDict(t.provenance);
  d["error"] = t.error;
  py::list failovers;
  for (const FailoverEvent& e : t.failovers)
    failovers.append(py::make_tuple(e.from, e.to, e.at_byte, e.error));
  d["failovers"] = failovers;
  return d;
}

py::dict LoadBinding(const py::dict& args) {
  LoadOptions options;
  options.model = args["model"].cast<std::string>();
  options.daemon = args["daemon"].cast<std::string>();
  options.rank = args["rank"].cast<int>();
  options.world_size = args["world_size"].cast<int>();
  options.device = args["device"].cast<std::string>();
  options.read.source = OrRaise(ParseSource(args["source"].cast<std::string>()));
  options.strategy.strategy = args["strategy"].cast<std::string>();
  options.strategy.tp = args["tp"].cast<int>();
  options.strategy.pp = args["pp"].cast<int>();
  if (!args["dtype"].is_none())
    options.strategy.load_dtype = OrRaise(DTypeFromAnyName(args["dtype"].cast<std::string>()));
  if (!args["init_missing"].is_none()) {
    options.init_missing = OrRaise(ParseInitPolicy(args["init_missing"].cast<std::string>()));
  }
  options.read.read_threads = args["read_threads"].cast<int>();
  options.read.timeout = absl::Seconds(args["timeout_s"].cast<double>());
  if (absl::Status s = CheckKnobs(options.read.read_threads, args["timeout_s"].cast<double>()); !s.ok())
    Raise(s);
  RankLoad load = RunInterruptible<RankLoad>([&](const std::atomic<bool>* cancelled) {
    LoadOptions o = options;
    o.read.cancelled = cancelled;
    return LoadRank(o);
  });
  py::dict out;
  py::list tensors;
  for (const LoadedTensor& t : load.tensors) tensors.append(LoadedTensorDict(t));
  out["tensors"] = tensors;
  out["rank"] = load.rank;
  out["world_size"] = load.world_size;
  out["node"] = load.node;
  out["answered_by"] = load.answered_by;
  out["device"] = load.device;
  out["plan_digest"] = load.plan_digest;
  out["plan_label"] = load.plan_label;
  out["failures"] = load.failures;
  out["direct_bytes"] = load.direct_bytes;
  out["streamed_bytes"] = load.streamed_bytes;
  out["seconds"] = load.seconds;
  // This rank's checks against the digests recorded at `register --digest` (None without them).
  py::object digests = py::none();
  if (load.has_digests) {
    int64_t matched = 0, sliced = 0, on_device = 0;
    for (const LoadedTensor& t : load.tensors) {
      if (!t.filled) continue;
      matched += t.digest == DigestCheck::kMatched;
      sliced += t.digest == DigestCheck::kSliced;
      on_device += t.digest == DigestCheck::kOnDevice;
    }
    py::dict counts;
    counts["matched"] = matched;
    counts["sliced_not_checked"] = sliced;
    counts["on_device_not_checked"] = on_device;
    digests = counts;
  }
  out["registered_digests"] = digests;
  return out;
}

}  // namespace
}  // namespace metaload

PYBIND11_MODULE(_native, m) {
  using namespace metaload;
  m.doc() = "metaload's C++ client library; use the `metaload` package, not this module.";
  py::class_<ModelView>(m, "ModelView")
      .def_readonly("model", &ModelView::model)
      .def_readonly("origin", &ModelView::origin)
      .def_readonly("answered_by", &ModelView::answered_by)
      .def_readonly("init_missing", &ModelView::init_missing)
      .def_readonly("tied_to", &ModelView::tied_to)
      .def_readonly("buffer_rules", &ModelView::buffer_rules)
      .def("stored", [](const ModelView& v) {
        py::dict out;
        for (const auto& [name, t] : v.stored) {
          out[py::str(name)] = py::make_tuple(std::string(DTypeCode(t.dtype)), t.shape, t.file);
        }
        return out;
      });
  m.def(
      "open_model",
      [](const std::string& model, const std::string& daemon, const std::string& checkpoint,
         double timeout_s) {
        if (absl::Status s = CheckKnobs(1, timeout_s); !s.ok()) Raise(s);
        ModelSpec spec{model, daemon, checkpoint, absl::Seconds(timeout_s)};
        return RunInterruptible<ModelView>([&](const std::atomic<bool>*) { return OpenModel(spec); });
      },
      py::arg("model"), py::arg("daemon"), py::arg("checkpoint"), py::arg("timeout_s"));
  m.def("materialize", &MaterializeBinding, py::arg("view"), py::arg("requests"), py::arg("source"),
        py::arg("init_missing"), py::arg("read_threads"), py::arg("timeout_s"), py::arg("check_only"));
  m.def("load_rank", &LoadBinding, py::arg("args"));
  // The device= of every entry point, by the rule `metactl load --device` follows.
  m.def(
      "resolve_device",
      [](const std::string& text, int rank) { return OrRaise(ResolveDevice(text, rank)).str(); },
      py::arg("text"), py::arg("rank"));
  // What transformers renames and fuses in checkpoints, as the architectures' records say it
  // (planner/skeleton/hf/architecture_registry.h), for metaload/_hf_names.py:
  // {"renames": [(module_part, checkpoint_part)], "fused_experts": [(fused, [per_expert])]}.
  m.def("checkpoint_renames", [] {
    const CheckpointRenames all = AllCheckpointRenames();
    py::list renames, fused_experts;
    for (const NameRename& r : all.renames) {
      renames.append(py::make_tuple(std::string(r.module_part), std::string(r.checkpoint_part)));
    }
    for (const FusedExperts& f : all.fused_experts) {
      py::list per_expert;
      for (absl::string_view part : f.per_expert) per_expert.append(std::string(part));
      fused_experts.append(py::make_tuple(std::string(f.fused), per_expert));
    }
    py::dict out;
    out["renames"] = renames;
    out["fused_experts"] = fused_experts;
    return out;
  });
  // metaload.set_credentials: metactl's --tls-ca/--tls-cert/--tls-key/--token-file for this
  // process; an empty path falls back to its METALOAD_* variable.
  m.def(
      "set_credentials",
      [](const std::string& ca, const std::string& cert, const std::string& key, const std::string& token) {
        CredentialFiles given;
        given.ca = ca, given.cert = cert, given.key = key, given.token = token;
        given.ca_from = "tls_ca", given.cert_from = "tls_cert", given.key_from = "tls_key";
        given.token_from = "token_file";
        if (absl::Status s =
                SetProcessCredentials(MergeCredentialFiles(given, CredentialFilesFromEnvironment(given)));
            !s.ok()) {
          Raise(s);
        }
      },
      py::arg("tls_ca"), py::arg("tls_cert"), py::arg("tls_key"), py::arg("token_file"));
}
