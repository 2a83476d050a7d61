#include "daemon/service/coordinator.h"

#include "absl/strings/str_cat.h"
#include "daemon/membership/node_restriction.h"
#include "daemon/requests/request_checks.h"
#include "daemon/serving/read_range/stream_table.h"
#include "planner/plan/fanout.h"
#include "proto/convert.h"
#include "proto/fanout_wire.h"
#include "proto/plan_answers.h"
#include "proto/raw_message.h"
#include "security/roles.h"
#include "util/identifiers.h"
#include "util/log.h"
#include "util/status_macros.h"

namespace metaload {

Coordinator::Coordinator(BackendContext context)
    : context_(std::move(context)),
      members_(Membership::Options{.member_timeout = context_.config->member_timeout,
                                   .max_names_per_identity = context_.config->max_names_per_identity}),
      registry_(ModelRegistry::Options{.max_models = context_.config->max_models,
                                       .max_tensors_per_model = context_.config->max_tensors_per_model,
                                       .max_record_bytes = context_.config->max_registry_bytes,
                                       .require_digests = context_.config->require_digests,
                                       .node = context_.config->node}),
      plans_(PlanCache::Options{.max_bytes = context_.config->plan_cache_bytes}) {
  members_.SetSelf(context_.self);
  members_.SetSelfLoad(context_.read_streams);
}

absl::Status Coordinator::Restore(RecordStore* store) {
  const absl::Time start = absl::Now();
  absl::StatusOr<StoredModels> stored = store->Load();
  if (!stored.ok()) {
    return Annotate(stored.status(), absl::StrCat("reading the registry in ", store->Describe()));
  }
  for (const absl::Status& skipped : stored->skipped) {
    LogError(absl::StrCat("registry: skipped ", skipped.message()));
  }
  int restored = 0;
  for (const StoredRecord& entry : stored->records) {
    const v1::ModelRecord& wire = entry.record;
    absl::Status usable = CheckModelRecord(wire);
    if (usable.ok() && wire.registered_on() == context_.config->node) {
      usable = CheckRecordFiles(wire, *context_.config, context_.file_system);
    }
    absl::StatusOr<ModelRecord> record = usable.ok() ? ModelRecordFromProto(wire) : usable;
    if (usable.ok()) usable = record.status();
    if (usable.ok()) {
      usable = registry_.Put(*record, RecordOrigin::kRestore, false, nullptr,
                             absl::StrCat("state_dir file ", QuoteForMessage(entry.origin, 512)));
    }
    if (usable.ok()) {
      usable = context_.meta->PutJson(wire.name(), wire.skeleton_json());
      if (!usable.ok()) registry_.Drop(wire.name());  // no store attached yet: memory only
    }
    if (!usable.ok()) {
      LogError(absl::StrCat("registry: skipped model ", QuoteForMessage(wire.name()), " from ", entry.origin,
                            ": ", usable.message()));
      continue;
    }
    ++restored;
  }
  registry_.AttachStore(store);
  LogInfo(absl::StrCat("registry: restored ", restored, " models from ", store->Describe(), " in ",
                       absl::ToInt64Milliseconds(absl::Now() - start), " ms (",
                       stored->records.size() - restored + stored->skipped.size(), " skipped)"));
  return absl::OkStatus();
}

absl::Status Coordinator::RestoreBindings(BindingStore* store) {
  absl::StatusOr<StoredBindings> stored = store->LoadBindings();
  if (!stored.ok()) return Annotate(stored.status(), "reading the member bindings in state_dir");
  for (const absl::Status& skipped : stored->skipped)
    LogError(absl::StrCat("members: skipped ", skipped.message()));
  for (const MemberBinding& binding : stored->bindings)
    members_.RestoreBinding(binding.name, binding.identity);
  bindings_ = store;
  LogInfo(absl::StrCat("members: ", stored->bindings.size(),
                       " names bound before the restart, each held for its own identity"));
  return absl::OkStatus();
}

void Coordinator::KeepBinding(const std::string& name) {
  absl::MutexLock lock(&bindings_mu_);
  unwritten_bindings_.insert(name);
  if (writing_bindings_) return;
  // Off the gRPC thread (it fsyncs).
  writing_bindings_ = context_.io->Post([this] { WriteBindings(); });
  if (!writing_bindings_) {
    LogError(absl::StrCat("members: the io queue is full; ", unwritten_bindings_.size(),
                          " changed bindings are kept in state_dir at the next change"));
  }
}

void Coordinator::WriteBindings() {
  while (true) {
    std::string name;
    {
      absl::MutexLock lock(&bindings_mu_);
      if (unwritten_bindings_.empty()) {
        writing_bindings_ = false;
        return;
      }
      name = std::move(unwritten_bindings_.extract(unwritten_bindings_.begin()).value());
    }
    // What the membership says of the name now: a later change marks it again, so the file
    // ends as the last change left it.
    const std::optional<std::string> identity = members_.BoundIdentity(name);
    const absl::Status kept = identity.has_value() ? bindings_->PutBinding(MemberBinding{name, *identity})
                                                   : bindings_->RemoveBinding(name);
    if (!kept.ok()) {
      LogError(absl::StrCat("members: could not keep whose node ", name,
                            " is in state_dir (after a restart, ",
                            "the name is anyone's until its member joins): ", kept.message()));
    }
  }
}

RoleStatus Coordinator::Status() const {
  RoleStatus status;
  status.is_coordinator = true;
  // Bounded: a reader's call copies at most kMaxStatusMemberBytes of members, however many.
  MemberStates states = members_.States(kMaxStatusMembers, kMaxStatusMemberBytes);
  for (const MemberStatus& member : states.listed) {
    if (member.state == MemberStatus::kUp) status.members.push_back(member.node);
  }
  status.member_states = std::move(states.listed);
  status.members_up = states.up;
  status.members_down = states.down;
  status.members_left = states.left;
  status.plans_cached = static_cast<uint32_t>(plans_.plans());
  status.plan_cache_bytes = plans_.held_bytes();
  for (std::shared_ptr<const RegisteredModel>& model : registry_.Models()) {
    ModelSummary& summary = status.models.emplace_back();
    MetaModelSummary meta;
    if (context_.meta->Summarize(model->record.name, &meta))
      summary.meta_tensor_count = meta.meta_tensor_count;
    summary.model = std::move(model);
  }
  return status;
}

absl::StatusOr<std::shared_ptr<const RegisteredModel>> Coordinator::FindModel(const std::string& name) {
  absl::StatusOr<std::shared_ptr<const RegisteredModel>> found = registry_.Find(name);
  if (!absl::IsNotFound(found.status())) return found;
  RefreshFromRegistry(name);
  return registry_.Find(name);
}

void Coordinator::Record(Registration prepared, bool replace, UnaryCall* call) {
  absl::Status recorded = RecordHere(prepared, replace);
  if (!recorded.ok()) LogRegistrationRefused(prepared.record.name(), recorded);
  call->Finish(recorded);
}

absl::Status Coordinator::RecordHere(const Registration& prepared, bool replace) {
  const std::string& name = prepared.record.name();
  // A peer first learns what another peer may have registered under this name, so that a
  // different checkpoint is refused (ALREADY_EXISTS) here as it would be there.
  RefreshFromRegistry(name);
  ML_ASSIGN_OR_RETURN(ModelRecord record, ModelRecordFromProto(prepared.record));
  // The registry first: a refused replacement must not leave the new skeleton behind.
  ML_RETURN_IF_ERROR(registry_.Put(record, RecordOrigin::kRegister, replace, &prepared.skeleton));
  ML_RETURN_IF_ERROR(context_.meta->Put(name, prepared.skeleton));
  LogInfo(absl::StrCat("registered ", name, " from ", record.checkpoint.dir, ": ",
                       prepared.skeleton.tensors.size(), " tensors, ", prepared.skeleton.total_size_bytes(),
                       " bytes"));
  return absl::OkStatus();
}

void Coordinator::Unregister(const v1::UnregisterModelRequest* request, v1::UnregisterModelResponse*,
                             UnaryCall* call) {
  // Persisting the removal writes to disk: not on this thread.
  PostOrRefuse(*context_.io, context_.config->node, call, [this, request, call] {
    RefreshFromRegistry(request->name());  // peers: registered elsewhere a moment ago
    absl::Status removed = registry_.Remove(request->name());
    if (removed.ok()) {
      context_.meta->Remove(request->name());
      LogInfo(absl::StrCat("unregistered ", request->name()));
    }
    call->Finish(removed);
  });
}

void Coordinator::Plan(const grpc::ByteBuffer*, std::shared_ptr<const v1::GetPlanRequest> request,
                       grpc::ByteBuffer* raw_response, UnaryCall* call) {
  absl::StatusOr<StrategyOptions> options = StrategyOptionsFromProto(*request);
  if (!options.ok()) {
    call->Finish(options.status());
    return;
  }
  // A plan held is answered from on the planning queue; one to build is built on the builds
  // queue, one at a time, so that answers from held plans never wait behind a build (issue 35:
  // they waited 43 s behind the plan of a world of 2^20 ranks).
  PostOrRefuse(*context_.planning, context_.config->node, call,
               [this, call, request, raw_response, options = *options] {
                 absl::StatusOr<std::shared_ptr<const RegisteredModel>> model = FindModel(request->model());
                 if (!model.ok()) return call->Finish(model.status());
                 std::vector<NodeSpec> members = members_.Live();
                 if (std::shared_ptr<const PlannedModel> planned =
                         plans_.Cached(**model, members, request->world_size(), options)) {
                   return Answer(request, std::move(planned), raw_response, call);
                 }
                 PostOrRefuse(*context_.builds, context_.config->node, call,
                              [this, call, request, raw_response, options, model = *std::move(model),
                               members = std::move(members)] {
                                absl::StatusOr<std::shared_ptr<const PlannedModel>> planned =
                                    plans_.Get(model, members, request->world_size(), options);
                                if (!planned.ok()) return call->Finish(planned.status());
                                Answer(request, *std::move(planned), raw_response, call);
                              });
               });
}

void Coordinator::Answer(std::shared_ptr<const v1::GetPlanRequest> request,
                         std::shared_ptr<const PlannedModel> planned, grpc::ByteBuffer* raw_response,
                         UnaryCall* call) {
  // Only an answer holds a slot of plan_answers, until it is sent: a call waiting for its
  // plan to be built holds no answer.
  AnswerLimit* answers = context_.plan_answers;
  call->WhenDone([answers] { answers->Release(); });
  answers->Submit(
      [this, call, request, raw_response, planned = std::move(planned)] {
        absl::StatusOr<std::string> answer = AnswerBytes(*request, *planned);
        if (answer.ok()) AppendToByteBuffer(*std::move(answer), raw_response);
        if (answer.ok() && request->has_rank()) LogPlanAnswered(*request, *planned, *call);
        call->Finish(answer.status());
      },
      [call](const absl::Status& refused) { call->Finish(refused); });
}

void Coordinator::LogPlanAnswered(const v1::GetPlanRequest& request, const PlannedModel& planned,
                                  const UnaryCall& call) const {
  if (context_.loads == nullptr) return;
  const CompactPlan& plan = planned.plan;
  context_.loads->PlanAnswered(PlanAsked{request.model(), plan.world_size, request.rank(), plan.strategy,
                                         [&plan] {
                                           uint64_t total = 0;
                                           for (const CompactRank& rank : plan.ranks)
                                             total += rank.size_bytes;
                                           return total;
                                         },
                                         PeerHost(call.context().peer())});
}

absl::StatusOr<std::string> Coordinator::AnswerBytes(const v1::GetPlanRequest& request,
                                                     const PlannedModel& planned) const {
  std::string answer;
  if (request.has_rank()) {
    ML_ASSIGN_OR_RETURN(answer, RankAnswerBytes(planned.plan, planned.tables, request.rank(),
                                                members_.LoadsOf(planned.members), kServersPerFile));
  } else {
    answer = WholePlanAnswer(planned.plan, planned.tables, planned.model->record.skeleton_json)
                 .SerializeAsString();
  }
  // Serialized messages concatenated merge: the flags join the answer built once per plan.
  v1::GetPlanResponse flags;
  if (request.has_rank() && request.fanout() && RankMayShare(planned.plan, request.rank())) {
    // Assigned once per plan, on the first ask of a rank that may share; each rank is sent its
    // part only (plan_fanout.h). A rank whose plan shares nothing (fsdp) gets none, and a plan
    // whose ranks all do never makes the coordinator assign.
    const absl::StatusOr<FanoutAssignment>& fan = planned.fanout->Get(planned);
    if (!fan.ok()) return fan.status();
    FanoutPartToProto(PartOf(*fan, request.rank()), flags.mutable_fanout());
  }
  flags.set_proof_required(context_.config->require_digests);
  flags.set_server_certificate(ServerCertificatePattern());
  answer += flags.SerializeAsString();
  return answer;
}

void Coordinator::Layout(const v1::GetLayoutRequest* request, v1::GetLayoutResponse* response,
                         UnaryCall* call) {
  // A model of millions of tensors is a large copy: not on this thread.
  PostOrRefuse(*context_.planning, context_.config->node, call, [this, request, response, call] {
    absl::StatusOr<v1::GetLayoutResponse> layout = LayoutOf(request->model());
    if (layout.ok()) *response = *std::move(layout);
    call->Finish(layout.status());
  });
}

absl::StatusOr<v1::GetLayoutResponse> Coordinator::LayoutOf(const std::string& name) {
  ML_ASSIGN_OR_RETURN(std::shared_ptr<const RegisteredModel> model, FindModel(name));
  const std::vector<NodeSpec> members = members_.Live();
  v1::GetLayoutResponse layout =
      LayoutAnswer(model->record, PlanFilesOf(model->record, members), members, members_.LoadsOf(members));
  layout.set_proof_required(context_.config->require_digests);
  layout.set_server_certificate(ServerCertificatePattern());
  return layout;
}

std::string Coordinator::ServerCertificatePattern() const {
  // Only under mutual TLS is a member bound to a certificate of its name (Join below), and thus
  // the server at its address provable; elsewhere ranks check the address they dial.
  return context_.security != nullptr && context_.security->mutual ? context_.security->node_certificate : "";
}

absl::StatusOr<OpenedFileCheck> Coordinator::AllowRead(const std::string& model, const std::string& path,
                                                       const StridedRuns& runs) {
  absl::StatusOr<std::shared_ptr<const RegisteredModel>> found = FindModel(model);
  if (!found.ok()) {
    return absl::PermissionDeniedError(
        absl::StrCat("ReadRange: ", QuoteForMessage(path, 512),
                     " is not a file of a registered model: ", found.status().message()));
  }
  ML_RETURN_IF_ERROR((*found)->served.Check(path, runs));
  // The model is kept alive by the check, for the stream's open.
  return OpenedFileCheck([model = *std::move(found), path](const RandomAccessFile& opened) {
    return model->served.CheckOpened(path, opened);
  });
}

absl::Status Coordinator::Takes(MemberCall) const { return absl::OkStatus(); }

absl::Status Coordinator::Join(const NodeSpec& node, bool leaving, uint32_t read_streams,
                               const Caller& caller) {
  ML_RETURN_IF_ERROR(Takes(MemberCall::kJoin));
  if (leaving) {
    absl::Status left = members_.Leave(node, caller.identity);
    if (left.ok()) {
      Log(LogLevel::kInfo,
          absl::StrCat("node ", node.name, " left (it is stopping), from ", QuoteForMessage(caller.peer),
                       " as ", caller.identity),
          {{"event", "member_left"}, {"node", node.name}, {"identity", caller.identity}});
    }
    return left;
  }
  // Under mutual TLS a member is who its certificate says (issue 23: any CA-signed certificate
  // joined as a new node, or as another's name); a certificate that names no one is no member
  // (issue 35: one without a common name skipped this rule and joined under any name).
  if (const std::string expected = NodeCertificateName(*context_.security, node.name);
      caller.certificate && caller.certificate_name != expected) {
    const absl::Status refused = absl::PermissionDeniedError(absl::StrCat(
        "node \"", node.name, "\" may join only with a certificate named \"", expected, "\"; ",
        caller.certificate_name.empty()
            ? "this client certificate names no one (no common name, no subject alternative name), and a "
              "certificate without a name never becomes a member"
            : absl::StrCat("this one is named ", QuoteForMessage(caller.certificate_name, 256),
                           " (tls.node_certificate in the coordinator's config: docs/security.md)")));
    Log(LogLevel::kWarning,
        absl::StrCat("Join of node ", QuoteForMessage(node.name), " from ", QuoteForMessage(caller.peer),
                     " refused: ", refused.message()),
        {{"event", "refused"}, {"call", "Join"}, {"node", node.name}, {"reason", refused.message()}});
    return refused;
  }
  bool bound = false;
  absl::StatusOr<bool> joined = members_.Join(node, read_streams, caller.identity, &bound);
  if (bound && bindings_ != nullptr) KeepBinding(node.name);
  if (joined.ok() && *joined) {
    Log(LogLevel::kInfo,
        absl::StrCat("node ", node.name, " joined from ", QuoteForMessage(caller.peer), " as ",
                     caller.identity, ", serving at ", node.address),
        {{"event", "member_up"},
         {"node", node.name},
         {"identity", caller.identity},
         {"address", node.address}});
  }
  if (!joined.ok()) {
    Log(LogLevel::kWarning,
        absl::StrCat("Join of node ", QuoteForMessage(node.name), " from ", QuoteForMessage(caller.peer),
                     " as ", caller.identity, " refused: ", joined.status().message()),
        {{"event", "refused"}, {"call", "Join"}, {"node", node.name}, {"reason", joined.status().message()}});
  }
  return joined.status();
}

void Coordinator::LogExpired() {
  for (const std::string& node : members_.NewlyDown()) {
    Log(LogLevel::kWarning,
        absl::StrCat("node ", node, " is down: not heard from for ",
                     absl::FormatDuration(context_.config->member_timeout),
                     " (member_timeout); new plans leave it out"),
        {{"event", "member_down"}, {"node", node}});
  }
}

absl::Status Coordinator::Release(const std::string& node, const Caller& caller) {
  ML_RETURN_IF_ERROR(Takes(MemberCall::kJoin));
  absl::Status released = members_.Release(node);
  if (released.ok() && bindings_ != nullptr) KeepBinding(node);
  if (released.ok()) {
    LogInfo(absl::StrCat("node ", node, " released by ", caller.identity, " from ",
                         QuoteForMessage(caller.peer), ": anyone may join under the name again"));
  }
  return released;
}

void Coordinator::Publish(const v1::PublishModelRequest* request, const Caller& caller, UnaryCall* call) {
  if (absl::Status takes = Takes(MemberCall::kPublishModel); !takes.ok()) {
    call->Finish(takes);
    return;
  }
  PostOrRefuse(*context_.planning, context_.config->node, call, [this, request, caller, call] {
    const v1::ModelRecord& wire = request->model();
    absl::StatusOr<ModelRecord> record = ModelRecordFromProto(wire);
    const std::string sent_by =
        absl::StrCat("PublishModel from ", QuoteForMessage(caller.peer), " as ", caller.identity);
    // A member (not an admin) publishes only its own node's registrations (issue 35).
    const bool member_only = !Has(caller.roles, Role::kAdmin);
    absl::Status put = record.status();
    if (put.ok() && member_only) {
      put = CheckMemberPublication(*record, caller.identity, members_.Bound(record->registered_on));
    }
    if (put.ok()) {
      put = registry_.Put(*record, member_only ? RecordOrigin::kMemberPublish : RecordOrigin::kPublish,
                          request->replace(), nullptr, sent_by);
    }
    if (absl::IsPermissionDenied(put)) {
      Log(LogLevel::kWarning, absl::StrCat(sent_by, " refused: ", put.message()),
          {{"event", "refused"},
           {"call", "PublishModel"},
           {"model", wire.name()},
           {"reason", put.message()}});
    }
    if (put.ok()) {
      put = context_.meta->PutJson(wire.name(), wire.skeleton_json());
      LogInfo(absl::StrCat("model ", wire.name(), " published by ", wire.registered_on(), " (from ",
                           caller.peer, " as ", caller.identity, ")"));
    }
    call->Finish(put);
  });
}

}  // namespace metaload
