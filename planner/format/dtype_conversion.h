// Which conversions between a checkpoint's stored dtype and the dtype a module holds keep a
// tensor's values (docs/integrity.md, "conversions"): between the floating types F16, BF16, F32
// and F64 a conversion is a cast of values (what load_state_dict and from_pretrained's dtype=
// do). FP8 and integer storage holds codes (quantized weights with their scales beside them,
// indexes): read as another type they are not the tensor's values, so such a conversion is
// refused wherever a load decides it (the resolver, `metactl check`), naming the quantization
// the checkpoint shows.
//
//   if (std::string why = ConversionRefusal(name, stored, held, has_stored); !why.empty()) refuse(why);
//
// Pure, planner-level: the client's resolver and the doctor ask the same question.
#ifndef METALOAD_PLANNER_FORMAT_DTYPE_CONVERSION_H_
#define METALOAD_PLANNER_FORMAT_DTYPE_CONVERSION_H_

#include <functional>
#include <string>

#include "absl/strings/string_view.h"
#include "planner/format/dtype.h"

namespace metaload {

// "" when `held` may be filled from `stored` bytes of tensor `name` (the same dtype, or a cast
// between convertible floats); else why not, naming the scale tensors beside it that the
// checkpoint holds (`has_stored` says whether it stores a name) and what to do.
std::string ConversionRefusal(absl::string_view name, DType stored, DType held,
                              const std::function<bool(const std::string&)>& has_stored);

}  // namespace metaload

#endif  // METALOAD_PLANNER_FORMAT_DTYPE_CONVERSION_H_
