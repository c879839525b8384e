"""Connect over HTTP/1.1 and HTTP/2: envelopes and errors, sessions (seqno order, duplicate
drop, replay), the two streaming RPCs, unary RPCs and authentication. It serves one `Service`
(service.py) and knows no protobuf and no Cursor: messages are opaque bytes here."""
