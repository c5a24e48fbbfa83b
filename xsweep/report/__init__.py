"""``xsweep report``: one self-contained HTML page of a sweep's results.

``result`` reads a sweep's folder, ``breakdown`` splits an iteration's time into parts
that add up, ``charts`` draws inline SVG, ``page`` puts the page together and writes it.
The charts are SVG written here rather than a plotting library's: the page then needs
no script, no library and nothing fetched, and stays small.
"""
