#include "sim/rig/free_port.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace sc::rig {

int pick_free_port(const std::string& addr) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = 0;
  if (inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1 ||
      bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    close(fd);
    return 0;
  }
  socklen_t len = sizeof sa;
  const int ok = getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  close(fd);
  return ok == 0 ? ntohs(sa.sin_port) : 0;
}

}  // namespace sc::rig
