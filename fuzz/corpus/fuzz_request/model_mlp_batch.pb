

a100-dgx*3
mlp
layers3

activationgelu
lossmse