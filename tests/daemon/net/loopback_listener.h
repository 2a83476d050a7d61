// A listening socket on 127.0.0.1 for daemon/net/'s tests: Accept() returns the server side of
// a real TCP connection from a chosen loopback address, as metad's accept loop would take it.
#ifndef METALOAD_TESTS_DAEMON_NET_LOOPBACK_LISTENER_H_
#define METALOAD_TESTS_DAEMON_NET_LOOPBACK_LISTENER_H_

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <utility>
#include <vector>

namespace metaload {

class Listener {
 public:
  Listener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(::listen(fd_, 64), 0);
    socklen_t length = sizeof(address_);
    EXPECT_EQ(::getsockname(fd_, reinterpret_cast<sockaddr*>(&address_), &length), 0);
  }
  ~Listener() {
    for (int fd : open_) ::close(fd);
    ::close(fd_);
  }

  int Accept(const char* source = "127.0.0.1") { return Connect(source).second; }

  // {client side, server side} of a new connection from `source`.
  std::pair<int, int> Connect(const char* source = "127.0.0.1") {
    int client = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in from{};
    from.sin_family = AF_INET;
    ::inet_pton(AF_INET, source, &from.sin_addr);
    EXPECT_EQ(::bind(client, reinterpret_cast<sockaddr*>(&from), sizeof(from)), 0);
    EXPECT_EQ(::connect(client, reinterpret_cast<sockaddr*>(&address_), sizeof(address_)), 0);
    int server = ::accept(fd_, nullptr, nullptr);
    EXPECT_GE(server, 0);
    open_.push_back(client);
    open_.push_back(server);
    return {client, server};
  }

  void Close(int fd) {
    ::close(fd);
    std::erase(open_, fd);
  }

 private:
  int fd_ = -1;
  sockaddr_in address_{};
  std::vector<int> open_;
};

}  // namespace metaload

#endif  // METALOAD_TESTS_DAEMON_NET_LOOPBACK_LISTENER_H_
