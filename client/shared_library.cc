// libmetaload.so is the client library's archives linked whole (client/CMakeLists.txt); this
// file gives the shared object its one source of its own: the version it was built as.
extern "C" const char* metaload_version() { return "0.1.0"; }
