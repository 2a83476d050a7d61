// Who is at the other end of a connection, in the words both metad's accept loop and gRPC can
// be matched by: the accept loop reads a socket's peer (getpeername), gRPC names the same
// connection's peer in ServerContext::peer() ("ipv4:127.0.0.1:5555", "ipv6:%5B::1%5D:5555"),
// and a connection is known by its client's address and port, which no two open connections to
// one listener share.
#ifndef METALOAD_DAEMON_NET_PEER_ADDRESS_H_
#define METALOAD_DAEMON_NET_PEER_ADDRESS_H_

#include <string>

#include "absl/strings/string_view.h"

namespace metaload {

// The host of the peer of connected socket `fd`: "10.0.0.7", "[::1]" (an IPv4-mapped IPv6
// peer is its IPv4 address, as gRPC names it), "unix" for a Unix socket, "" when it has none.
std::string SocketPeerHost(int fd);

// The peer of connected TCP socket `fd` with its port: "10.0.0.7:5555", "[::1]:5555"; "" when
// it has none (not TCP, or no longer connected).
std::string SocketPeerAddress(int fd);

// The same text for gRPC's peer string of a call ("ipv4:10.0.0.7:5555",
// "ipv6:%5B::1%5D:5555", a zone id dropped); "" for anything else (a Unix socket, garbage).
std::string GrpcPeerAddress(absl::string_view peer);

}  // namespace metaload

#endif  // METALOAD_DAEMON_NET_PEER_ADDRESS_H_
