"""Wire format: framing, the kio codec and registry, and the record batch header view.

May import: kio, crc32c, stdlib. Sits beside the layers; net, dispatch, handlers use it,
storage uses only wire.batch.
"""
