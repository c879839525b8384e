from cursor_byok.transport.cursor.proto.aiserver_pb2 import *  # noqa: F403
