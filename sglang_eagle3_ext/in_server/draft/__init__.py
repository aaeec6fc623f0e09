"""The draft's side inside SGLang's processes: the strict loader around SGLang's load_weights (`loader`), the fc
input-width check at forward time (`guard`), and a new draft swapped into the running server (`swap`, its tensors
in place: `swap_tensors`). The rules they apply are the shared ones of ../../draft/; the swap's client is
../../draft/swap/."""
