// metaload._native: the client library (libmetaload.so) for Python. Thin: every decision is
// made in C++ (client/resolve/materialize.h, client/load/rank_loader.h) or in the Python package;
// this file converts arguments, releases the GIL while bytes move, turns Ctrl-C into a cancelled
// load, and raises the package's exceptions (metaload/_errors.py) for failed statuses.
#include <pybind11/stl.h>
#include <torch/csrc/DynamicTypes.h>  // torch.dtype of a c10::ScalarType
#include <torch/csrc/utils/pybind.h>  // at::Tensor <-> torch.Tensor

#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/load/device.h"
#include "client/load/rank_loader.h"
#include "client/python/native/admission_binding.h"
#include "client/python/native/fanout_binding.h"
#include "client/python/native/raise.h"
#include "client/python/native/verify_binding.h"
#include "client/read/knobs.h"
#include "client/resolve/materialize.h"
#include "client/verify/group_sum.h"
#include "libtorch/torch_glue.h"
#include "planner/format/dtype.h"
#include "planner/skeleton/hf/hf_config.h"
#include "security/client_credentials.h"
#include "util/error_kind.h"
#include "util/fs/location.h"
#include "util/fs/memory_file_system.h"
#include "util/fs/storage.h"
#include "util/status_macros.h"
#include "util/units.h"

namespace py = pybind11;

namespace metaload {
namespace {

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
    // Nothing may escape a thread's function (std::terminate kills the training process):
    // an exception from the work is its error.
    absl::StatusOr<T> r = absl::InternalError("the load stopped");
    try {
      r = work(&cancelled);
    } catch (const std::exception& e) {
      r = absl::InternalError(absl::StrCat("the load stopped: ", e.what()));
    }
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
  ML_RETURN_IF_ERROR(CheckReadThreads(read_threads));
  return TimeoutFromSeconds("timeout_s", timeout_s).status();
}

// A LoadedTensor's slice (one dimension of the whole) as the box it is: start and length per
// dimension, as a Request's box and the package's LoadReport.slices say it.
std::optional<TensorBox> SliceBox(const LoadedTensor& t) {
  if (!t.slice.has_value()) return std::nullopt;
  TensorBox box{std::vector<int64_t>(t.full_shape.size(), 0), t.full_shape};
  box.start[t.slice->dim] = t.slice->start;
  box.length[t.slice->dim] = t.slice->length;
  return box;
}

// A Python callable as a load's progress callback (include/metaload/progress.h): called under
// the GIL from the load's progress thread (the waiting thread of RunInterruptible gives the GIL
// up every 100 ms); what it raises ends its calls with the exception's text as the warning.
ProgressCallback PythonProgress(const py::object& fn) {
  if (fn.is_none()) return ProgressCallback();
  // The last copy of the callback may go on any thread: the reference is dropped under the GIL.
  std::shared_ptr<py::object> held(new py::object(fn), [](py::object* o) {
    py::gil_scoped_acquire gil;
    delete o;
  });
  return [held](const LoadProgress& p) {
    py::gil_scoped_acquire gil;
    try {
      (*held)(p);
    } catch (py::error_already_set& e) {
      throw std::runtime_error(e.what());  // its Python state dropped here, under the GIL
    }
  };
}

MaterializeOutcome MaterializeBinding(const ModelView& view, std::vector<MaterializeRequest> requests,
                                      const std::string& source_text,
                                      const std::optional<std::string>& init_missing, int read_threads,
                                      double timeout_s, bool check_only, const py::object& fan_out,
                                      bool dequantize, const py::object& progress) {
  if (absl::Status s = CheckKnobs(read_threads, timeout_s); !s.ok()) Raise(s);
  // Fan-out (the package's replica groups, parsed while the GIL is held): the fill reads and
  // exchanges (client/load/fanout_fill.h).
  std::optional<PythonFanout> fan;
  if (!fan_out.is_none() && !check_only) fan = OrRaise(ParseFanout(fan_out.cast<py::dict>(), requests));
  MaterializeSettings settings;
  if (fan.has_value()) settings.fill = fan->Fill();
  settings.check_only = check_only;
  settings.dequantize = dequantize;
  settings.read.source = OrRaise(ParseSource(source_text));
  if (init_missing.has_value()) settings.init_missing = OrRaise(ParseInitPolicy(*init_missing));
  settings.read.read_threads = read_threads;
  settings.read.timeout = absl::Seconds(timeout_s);
  settings.read.progress = PythonProgress(progress);
  return RunInterruptible<MaterializeOutcome>([&](const std::atomic<bool>* cancelled) {
    MaterializeSettings s = settings;
    s.read.cancelled = cancelled;
    absl::StatusOr<MaterializeOutcome> outcome = Materialize(view, requests, s);
    if (outcome.ok() && fan.has_value()) {
      outcome->fanout_received_bytes = fan->exchanged->received_bytes;
      outcome->fanout_sent_bytes = fan->exchanged->sent_bytes;
      outcome->fanout_notes = fan->exchanged->notes;
    }
    return outcome;
  });
}

RankLoad LoadBinding(const std::string& model, const std::string& daemon, int rank, int world_size,
                     const std::string& device, const std::string& source, const std::string& strategy,
                     int tp, int pp, const std::optional<std::string>& dtype,
                     const std::optional<std::string>& init_missing, int read_threads, double timeout_s,
                     const py::object& group, const std::string& fanout_key, bool dequantize,
                     const py::object& progress) {
  LoadOptions options{.model = model,
                      .daemon = daemon,
                      .rank = rank,
                      .world_size = world_size,
                      .device = device,
                      .strategy = {.strategy = strategy, .tp = tp, .pp = pp}};
  options.read.source = OrRaise(ParseSource(source));
  if (dtype.has_value()) options.strategy.load_dtype = OrRaise(DTypeFromAnyName(*dtype));
  options.strategy.dequantize = dequantize;
  if (init_missing.has_value()) options.init_missing = OrRaise(ParseInitPolicy(*init_missing));
  options.read.read_threads = read_threads;
  options.read.timeout = absl::Seconds(timeout_s);
  options.read.progress = PythonProgress(progress);
  if (absl::Status s = CheckKnobs(read_threads, timeout_s); !s.ok()) Raise(s);
  // Fan-out as `metactl load` does it: one Gloo group of the plan's ranks, made on the store of the
  // caller's group (whose ranks are the plan's), under keys of this call's own.
  if (!group.is_none() && world_size > 1) {
    ProcessGroupPtr pg = py::cast<ProcessGroupPtr>(group);
    if (pg->getRank() != rank || pg->getSize() != world_size) {
      Raise(absl::InvalidArgumentError(absl::StrCat("rank ", rank, " of ", world_size, " is rank ",
                                                    pg->getRank(), " of ", pg->getSize(),
                                                    " in process_group")));
    }
    c10::intrusive_ptr<c10d::Store> store = pg->getStore();
    if (store) {
      options.fan_out = FanoutSettings{.job = GlooFanoutJob(
                                           [store, fanout_key]() -> absl::StatusOr<RendezvousStore> {
                                             return c10::make_intrusive<c10d::PrefixStore>(fanout_key, store);
                                           },
                                           rank, world_size, absl::Seconds(timeout_s)),
                                       .timeout = absl::Seconds(timeout_s)};
    }
  }
  return RunInterruptible<RankLoad>([&](const std::atomic<bool>* cancelled) {
    LoadOptions o = options;
    o.read.cancelled = cancelled;
    return LoadRank(o);
  });
}

// One part of a box, for Python: its starts or its lengths; None without a box.
std::optional<std::vector<int64_t>> BoxPart(const std::optional<TensorBox>& box, bool start) {
  if (!box.has_value()) return std::nullopt;
  return start ? box->start : box->length;
}

// The records the functions take and return (metaload/_native.pyi types them): the library's
// own structs, read-only, under the names the package uses.
void BindRecords(py::module_& m) {
  py::class_<TensorLayout>(m, "StoredTensor")
      .def_property_readonly("dtype", [](const TensorLayout& t) { return std::string(DTypeCode(t.dtype)); })
      // The one dtype table (planner/format/dtype.h, libtorch/torch_glue.h): torch's dtype of
      // the stored one, None where torch has none.
      .def_property_readonly(
          "torch_dtype",
          [](const TensorLayout& t) -> py::object {
            absl::StatusOr<c10::ScalarType> type = ToScalarType(t.dtype);
            if (!type.ok()) return py::none();
            return py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(torch::getTHPDtype(*type)));
          })
      .def_readonly("shape", &TensorLayout::shape)
      .def_readonly("file", &TensorLayout::file);
  py::class_<ModelView>(m, "ModelView")
      .def_readonly("model", &ModelView::model)
      .def_readonly("origin", &ModelView::origin)
      .def_readonly("answered_by", &ModelView::answered_by)
      .def_readonly("hf_config_json", &ModelView::hf_config_json)
      .def_readonly("digest_note", &ModelView::digest_note)
      .def_readonly("proof_required", &ModelView::proof_required)
      .def_readonly("init_missing", &ModelView::init_missing)
      .def_readonly("tied_to", &ModelView::tied_to)
      .def_readonly("buffer_rules", &ModelView::buffer_rules)
      .def("stored", [](const ModelView& v) { return v.stored; })
      // The quantization config.json declares: (method, description, capability), or None.
      .def_property_readonly(
          "quantization",
          [](const ModelView& v) -> std::optional<std::tuple<std::string, std::string, std::string>> {
            if (!v.quantization.has_value()) return std::nullopt;
            return std::make_tuple(v.quantization->method, v.quantization->Description(),
                                   v.quantization->Capability());
          })
      // Values stored as codes and scales: value name -> (codes name, scales name, value shape, rule).
      .def_property_readonly("quantized", [](const ModelView& v) {
        std::map<std::string, std::tuple<std::string, std::string, std::vector<int64_t>, std::string>> out;
        for (const auto& [name, q] : v.quantized.values)
          out[name] = {q.codes.name, q.scales.name, q.shape, q.Rule()};
        return out;
      });
  py::class_<MaterializeRequest>(m, "Request")
      .def(py::init([](std::string name, std::vector<int64_t> full_shape, at::Tensor dest,
                       std::optional<std::vector<int64_t>> box_start,
                       std::optional<std::vector<int64_t>> box_length, bool is_buffer,
                       std::vector<int64_t> scale_block) {
             if (box_start.has_value() != box_length.has_value()) {
               Raise(absl::InvalidArgumentError(
                   absl::StrCat(name, ": give both box_start and box_length, or neither")));
             }
             // A granularity is elements per scale along each of the tensor's dimensions.
             bool bad_block = !scale_block.empty() && scale_block.size() != full_shape.size();
             for (int64_t b : scale_block) bad_block = bad_block || b <= 0;
             if (bad_block) {
               Raise(absl::InvalidArgumentError(
                   absl::StrCat(name, ": scale_block [", absl::StrJoin(scale_block, ", "),
                                "] must give a positive number of elements per scale for each of its ",
                                full_shape.size(), " dimensions")));
             }
             std::optional<TensorBox> box;
             if (box_start.has_value()) box = TensorBox{*std::move(box_start), *std::move(box_length)};
             return MaterializeRequest{std::move(name), std::move(full_shape), std::move(box),
                                       is_buffer,       std::move(dest),       std::move(scale_block)};
           }),
           py::arg("name"), py::arg("full_shape"), py::arg("dest"), py::kw_only(),
           py::arg("box_start") = py::none(), py::arg("box_length") = py::none(),
           py::arg("is_buffer") = false, py::arg("scale_block") = std::vector<int64_t>())
      .def_readonly("name", &MaterializeRequest::name)
      .def_readonly("full_shape", &MaterializeRequest::full_shape)
      .def_property_readonly("box_start", [](const MaterializeRequest& r) { return BoxPart(r.box, true); })
      .def_property_readonly("box_length", [](const MaterializeRequest& r) { return BoxPart(r.box, false); })
      .def_readonly("is_buffer", &MaterializeRequest::is_buffer)
      .def_readonly("scale_block", &MaterializeRequest::scale_block)
      .def_readonly("dest", &MaterializeRequest::dest);
  // A Provenance's fields (client/read/provenance.h), for metaload._core.report.Provenance.from_native:
  // the package makes the text users see from them, by metactl's rules.
  py::class_<Provenance>(m, "Provenance")
      .def_property_readonly("kind",
                             [](const Provenance& p) { return std::string(ProvenanceKindName(p.kind)); })
      .def_readonly("nodes", &Provenance::nodes)
      .def_property_readonly("converted_to",
                             [](const Provenance& p) -> std::optional<std::string> {
                               if (!p.converted_to.has_value()) return std::nullopt;
                               return std::string(DTypeCode(*p.converted_to));
                             })
      .def_readonly("rule", &Provenance::rule)
      .def_readonly("tied_to", &Provenance::tied_to);
  py::class_<FailoverEvent>(m, "Failover")  // "from" is a Python keyword: source -> target
      .def_readonly("source", &FailoverEvent::from)
      .def_readonly("target", &FailoverEvent::to)
      .def_readonly("at_byte", &FailoverEvent::at_byte)
      .def_readonly("error", &FailoverEvent::error);
  py::class_<FillResult>(m, "TensorResult")
      .def_readonly("filled", &FillResult::filled)
      .def_readonly("provenance", &FillResult::provenance)
      .def_readonly("error", &FillResult::error)
      .def_readonly("failovers", &FillResult::failovers)
      // What its bytes prove of the stored tensor (client/verify/tensor_proof.h): handed back to
      // exchange_reports at verification; None for what was not read.
      .def_readonly("proof", &FillResult::proof)
      .def_readonly("more_proofs", &FillResult::more_proofs);
  py::class_<TensorProof>(m, "Proof")
      .def_readonly("stored", &TensorProof::stored)
      .def_readonly("index", &TensorProof::index)
      .def_readonly("tile_count", &TensorProof::tile_count)
      .def_property_readonly(
          "digest",
          [](const TensorProof& p) {
            return std::string(p.digest.has_value() ? DigestKindName(p.digest->kind) : "none");
          })
      .def_property_readonly("tiles_hashed", [](const TensorProof& p) { return p.sum.tiles_hashed; })
      .def_property_readonly("tiles_cut", [](const TensorProof& p) { return p.sum.tiles_cut; });
  py::class_<LoadProgress>(m, "Progress")
      .def_readonly("direct_bytes", &LoadProgress::direct_bytes)
      .def_readonly("streamed_bytes", &LoadProgress::streamed_bytes)
      .def_readonly("received_bytes", &LoadProgress::received_bytes)
      .def_readonly("total_bytes", &LoadProgress::total_bytes)
      .def_readonly("tensors_done", &LoadProgress::tensors_done)
      .def_readonly("tensors_total", &LoadProgress::tensors_total)
      .def_readonly("seconds", &LoadProgress::seconds)
      .def_readonly("finished", &LoadProgress::finished);
  py::class_<Finding>(m, "Finding")
      .def_readonly("tensor", &Finding::tensor)
      .def_readonly("why", &Finding::why);
  py::class_<MaterializeOutcome>(m, "MaterializeOutcome")
      .def_readonly("refused", &MaterializeOutcome::refused)
      .def_readonly("summary", &MaterializeOutcome::summary)
      .def_readonly("results", &MaterializeOutcome::results)
      .def_readonly("direct_bytes", &MaterializeOutcome::direct_bytes)
      .def_readonly("streamed_bytes", &MaterializeOutcome::streamed_bytes)
      .def_readonly("fanout_received_bytes", &MaterializeOutcome::fanout_received_bytes)
      .def_readonly("fanout_sent_bytes", &MaterializeOutcome::fanout_sent_bytes)
      .def_readonly("fanout_notes", &MaterializeOutcome::fanout_notes);
  // What became of it as a TensorResult, as materialize reports each request.
  py::class_<LoadedTensor>(m, "LoadedTensor")
      .def_readonly("name", &LoadedTensor::name)
      .def_readonly("tensor", &LoadedTensor::tensor)
      .def_property_readonly("box_start", [](const LoadedTensor& t) { return BoxPart(SliceBox(t), true); })
      .def_property_readonly("box_length", [](const LoadedTensor& t) { return BoxPart(SliceBox(t), false); })
      .def_readonly("full_shape", &LoadedTensor::full_shape)
      .def_property_readonly("result", [](const LoadedTensor& t) {
        return FillResult{t.filled, t.provenance, t.error, t.failovers, t.proof};
      });
  py::class_<RankLoad>(m, "RankLoad")
      .def_readonly("tensors", &RankLoad::tensors)
      .def_readonly("rank", &RankLoad::rank)
      .def_readonly("world_size", &RankLoad::world_size)
      .def_readonly("node", &RankLoad::node)
      .def_readonly("answered_by", &RankLoad::answered_by)
      .def_readonly("device", &RankLoad::device)
      .def_readonly("plan_digest", &RankLoad::plan_digest)
      .def_readonly("proof_required", &RankLoad::proof_required)
      .def_readonly("plan_label", &RankLoad::plan_label)
      .def_readonly("failures", &RankLoad::failures)
      .def_readonly("direct_bytes", &RankLoad::direct_bytes)
      .def_readonly("streamed_bytes", &RankLoad::streamed_bytes)
      .def_readonly("fanout_received_bytes", &RankLoad::fanout_received_bytes)
      .def_readonly("fanout_sent_bytes", &RankLoad::fanout_sent_bytes)
      .def_readonly("fanout_notes", &RankLoad::fanout_notes)
      .def_readonly("seconds", &RankLoad::seconds)
      .def_readonly("has_digests", &RankLoad::has_digests);
}

}  // namespace
}  // namespace metaload

PYBIND11_MODULE(_native, m) {
  using namespace metaload;
  m.doc() = "metaload's C++ client library; use the `metaload` package, not this module.";
  BindRecords(m);
  RegisterVerify(m);
  RegisterAdmission(m);
  // What identifies the thing is positional; every option is a keyword, and none has a default
  // here: the package (metaload/*.py) decides them.
  m.def(
      "open_model",
      [](const std::string& model, const std::string& daemon, const std::string& checkpoint,
         double timeout_s) {
        if (absl::Status s = CheckKnobs(1, timeout_s); !s.ok()) Raise(s);
        ModelSpec spec{model, daemon, checkpoint, absl::Seconds(timeout_s)};
        return RunInterruptible<ModelView>([&](const std::atomic<bool>*) { return OpenModel(spec); });
      },
      py::arg("model"), py::kw_only(), py::arg("daemon"), py::arg("checkpoint"), py::arg("timeout_s"));
  m.def("materialize", &MaterializeBinding, py::arg("view"), py::arg("requests"), py::kw_only(),
        py::arg("source"), py::arg("init_missing").none(true), py::arg("read_threads"), py::arg("timeout_s"),
        py::arg("check_only"), py::arg("fan_out").none(true) = py::none(), py::arg("dequantize") = false,
        py::arg("progress").none(true) = py::none());
  m.def("load_rank", &LoadBinding, py::arg("model"), py::kw_only(), py::arg("daemon"), py::arg("rank"),
        py::arg("world_size"), py::arg("device"), py::arg("source"), py::arg("strategy"), py::arg("tp"),
        py::arg("pp"), py::arg("dtype").none(true), py::arg("init_missing").none(true),
        py::arg("read_threads"), py::arg("timeout_s"), py::arg("group").none(true) = py::none(),
        py::arg("fanout_key") = "", py::arg("dequantize") = false,
        py::arg("progress").none(true) = py::none());
  // The bound every wait is held to (client/read/knobs.h), for checks the package makes before
  // it calls into the core (a process group it would make first).
  m.def(
      "check_timeout",
      [](const std::string& name, double seconds) { (void)OrRaise(TimeoutFromSeconds(name, seconds)); },
      py::arg("name"), py::arg("seconds"));
  // Sizes as metactl prints them ("1.50 GiB", util/units.h): the progress bar's postfix.
  m.def(
      "format_bytes", [](uint64_t size_bytes) { return FormatBytes(size_bytes); }, py::arg("size_bytes"));
  // The device= of every entry point, by the rule `metactl load --device` follows.
  m.def(
      "resolve_device",
      [](const std::string& text, int rank) { return OrRaise(ResolveDevice(text, rank)).str(); },
      py::arg("text"), py::kw_only(), py::arg("rank"));
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
      py::kw_only(), py::arg("tls_ca"), py::arg("tls_cert"), py::arg("tls_key"), py::arg("token_file"));
  // The storage seam (util/fs/storage.h) for the package's own reads of checkpoint locations:
  // what a location is ("file", "folder", "missing", "other"), the names in a folder, and the
  // text of a folder's config.json.
  m.def(
      "location_kind",
      [](const std::string& location) {
        // In PathKind's order: kMissing, kFile, kFolder, kLink (links are followed), kOther.
        static constexpr const char* kNames[] = {"missing", "file", "folder", "other", "other"};
        return kNames[static_cast<int>(OrRaise(Storage().KindOf(location)))];
      },
      py::arg("location"));
  m.def(
      "list_location", [](const std::string& location) { return OrRaise(Storage().List(location)); },
      py::arg("location"));
  m.def(
      "read_small_file",
      [](const std::string& location, const std::string& what) {
        return OrRaise(ReadSmallFile(location, kMaxConfigFileBytes, what));
      },
      py::arg("location"), py::arg("what"));
  // Location arithmetic (util/fs/location.h), so that the package spells no location with
  // os.path, which knows POSIX paths only.
  m.def(
      "normal_location", [](const std::string& location) { return NormalLocation(location); },
      py::arg("location"));
  m.def(
      "location_scheme", [](const std::string& location) { return SchemeOf(location); }, py::arg("location"));
  m.def(
      "location_name", [](const std::string& location) { return BaseNameOf(NormalLocation(location)); },
      py::arg("location"));
  m.def(
      "join_location",
      [](const std::string& dir, const std::string& name) { return JoinLocation(dir, name); }, py::arg("dir"),
      py::arg("name"));
  m.def(
      "read_config_json",
      [](const std::string& folder) {
        return OrRaise(ReadHfConfigText(JoinLocation(folder, "config.json")));
      },
      py::arg("folder"));
  // Tests only: puts `data` at `location` of the in-memory back end, registered for "mem://"
  // in this process on first use (util/fs/memory_file_system.h), so that tests read a checkpoint
  // through a second back end with every API. Nothing in the package calls it.
  m.def(
      "_test_memory_put",
      [](const std::string& location, py::bytes data) {
        RegisteredMemoryFileSystem().Put(location, std::string(data));
      },
      py::arg("location"), py::arg("data"));
}
