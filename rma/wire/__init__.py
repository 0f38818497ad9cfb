"""Sans-IO wire codecs: feed bytes or decoded JSON in, get parsed values out.

Nothing here opens a socket, reads a clock or sleeps; the shell (``rma_shell``) moves the
bytes and feeds them to these decoders and assemblers.
"""
