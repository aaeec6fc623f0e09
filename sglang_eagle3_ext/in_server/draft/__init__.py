"""The draft's side inside SGLang's processes: the strict loader around SGLang's load_weights (`loader`), the fc
input-width check at forward time (`guard`), the target made to capture exactly the layers the draft was
trained on (`capture_layers`), and a new draft swapped into the running server (`swap`, its tensors
in place: `swap_tensors`). The rules they apply are the shared ones of ../../draft/; the swap's client is
../../draft/swap/."""
