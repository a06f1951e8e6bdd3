/* Raw TCP echo: every byte received is sent back, in order (echo.tcp_port).
 *
 * The yardstick of the connection layer: no parsing, so its cost is the layer's own. Input is
 * copied into the connection's output and flushed once per read. Backpressure is the layer's:
 * while the peer does not read and queued output is above server.output_high_water_bytes the
 * connection stops reading (and so does the peer's sending, through TCP flow control), so memory
 * per connection stays bounded by the high-water mark plus one read. Timeouts: the idle timeout
 * (server.idle_timeout_ms) runs between reads; connection limits are the server's. No state
 * beyond the connection; listener ctx unused.
 */
#ifndef SF_PROTO_ECHO_H
#define SF_PROTO_ECHO_H

#include "net/proto.h"

extern const proto echo_proto;

#endif
